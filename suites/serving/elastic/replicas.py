"""Replicas of a server behind the router (router.py): the reference target, or a command
template (``command_template``: ``{port}``, ``{replica}``, ``{env:NAME}``), each in a
process group of its own (``launched_server``), and changed while load runs:

- ``scale_out``: start one more, wait until it answers its model list, register it with the
  router, wait until the router lists it healthy;
- ``scale_in``: deregister it (the router sends it nothing new), wait until its own /metrics
  says it holds no request (or the drain time is up), then stop it (SIGTERM, then SIGKILL);
- ``kill``: SIGKILL its whole group, without telling the router;
- ``restart``: start it again on its port (the router's health checks find a killed one
  again; a scaled-in one is registered again).

``close`` stops the router and every replica.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from moeperf.collectors.export import metric_names as mn
from moeperf.collectors.sources.target_metrics import ExpositionError, read_exposition
from moeperf.suites.errors import TargetError
from moeperf.suites.serving.command_template import render
from moeperf.suites.serving.elastic.router import Router, RouterSettings
from moeperf.suites.serving.launched_server import LaunchedServer, NotReady, free_port
from moeperf.suites.serving.preflight import TargetCheck, TargetUnreachable, check_target

# How a replica is started: (its index, its port) -> (argv, the secret values in it).
Launch = Callable[[int, int], tuple[list[str], list[str]]]


def command_launch(template: str, environ: Mapping[str, str] = os.environ) -> Launch:
    """Replicas of a command template (``elastic.command``)."""
    return lambda index, port: render(template, port, {"replica": index}, environ,
                                      "elastic.command")  # fmt: skip


def reference_launch(config: Mapping[str, Any]) -> Launch:
    """Replicas of the reference target with ``config`` ([target.reference]'s knobs)."""
    text = json.dumps(dict(config))
    return lambda _index, port: (
        [sys.executable, "-m", "moeperf.targets.serving", "--port", str(port), "--config", text],
        [],
    )


_POLL_S = 0.1
_TAIL_CHARS = 1500


@dataclass
class Replica:
    """One replica: its index (in start order), URL, and its server while it runs."""

    index: int
    url: str
    port: int
    server: LaunchedServer
    # Where it stands with the router and its process.
    state: str = "serving"  # serving, removed (scaled in), killed
    starts_s: list[float] = field(default_factory=list)  # launch until it answered

    @property
    def alive(self) -> bool:
        return self.server.alive


class ReplicaSet:
    """``replicas`` servers started by ``launch`` behind a router, until ``close``."""

    def __init__(
        self,
        launch: Launch,
        replicas: int,
        get: Callable[[str, float], Any],
        startup_timeout_s: float = 120.0,
        router: RouterSettings | None = None,
    ):
        self._launch_argv, self._get = launch, get
        self.startup_timeout_s = startup_timeout_s
        self.replicas: list[Replica] = []
        self.router: Router | None = None
        try:
            # Launched together, then waited for: their loading overlaps.
            launched = [self._launch(i, free_port()) for i in range(replicas)]
            for replica, began in launched:
                self._await_answer(replica, began)
            self.router = Router([r.url for r in self.replicas], router or RouterSettings())
        except BaseException:
            self.close()
            raise

    @property
    def url(self) -> str:
        """Where clients send: the router."""
        assert self.router is not None
        return self.router.url

    def serving(self) -> list[Replica]:
        return [r for r in self.replicas if r.state == "serving"]

    def scale_out(self) -> Replica:
        """One more replica, answering and registered (module docstring)."""
        replica, began = self._launch(len(self.replicas), free_port())
        self._await_answer(replica, began)
        assert self.router is not None
        self.router.add(replica.url, self.startup_timeout_s)
        return replica

    def scale_in(self, index: int, drain_timeout_s: float) -> float:
        """Deregister replica ``index``, let what it runs finish, stop it; the seconds its
        drain took (``drain_timeout_s`` when requests were still running then)."""
        replica = self.replicas[index]
        assert self.router is not None
        self.router.remove(replica.url, self.startup_timeout_s)
        began = time.monotonic()
        while time.monotonic() - began < drain_timeout_s and in_flight(replica.url) != 0:
            time.sleep(_POLL_S)
        drained_s = time.monotonic() - began
        replica.server.stop()
        replica.state = "removed"
        return drained_s

    def kill(self, index: int) -> None:
        """SIGKILL replica ``index``'s process group; the router is not told."""
        replica = self.replicas[index]
        replica.server.kill()
        replica.state = "killed"

    def restart(self, index: int) -> None:
        """Start replica ``index`` again on its port, and wait until it answers."""
        replica = self.replicas[index]
        replica.server.stop()  # reaps what a kill left, closes its output
        again, began = self._launch(index, replica.port)
        self._await_answer(again, began)
        assert self.router is not None
        if all(w.url != replica.url for w in self.router.workers()):  # it was scaled in
            self.router.add(replica.url, self.startup_timeout_s)

    def close(self) -> None:
        """The router, then every replica, stopped (each one's group, SIGTERM then SIGKILL)."""
        if self.router is not None:
            self.router.close()
        for replica in self.replicas:
            replica.server.stop()

    def _launch(self, index: int, port: int) -> tuple[Replica, float]:
        argv, secrets = self._launch_argv(index, port)
        try:
            server = LaunchedServer(argv, secrets=secrets)
        except OSError as exc:
            raise TargetError(f"could not launch replica {index}: {exc}") from None
        url = f"http://127.0.0.1:{port}"
        if index < len(self.replicas):  # a restart: the same replica, a new process
            replica = self.replicas[index]
            replica.server, replica.state = server, "serving"
        else:
            replica = Replica(index, url, port, server)
            self.replicas.append(replica)
        return replica, time.monotonic()

    def _await_answer(self, replica: Replica, began: float) -> None:
        def answered() -> TargetCheck | None:
            try:
                return check_target(replica.url, self._get, timeout_s=2.0)
            except TargetUnreachable:
                return None

        try:
            replica.server.wait_until(answered, self.startup_timeout_s, _POLL_S)
        except NotReady as exc:
            raise TargetError(
                f"replica {replica.index} ({replica.url}) {exc}: {replica.server.tail(_TAIL_CHARS)}"
            ) from None
        replica.starts_s.append(time.monotonic() - began)


def in_flight(url: str) -> float | None:
    """Requests the server at ``url`` holds now, running and waiting, from its own /metrics
    (vLLM's, SGLang's, the reference's and the synthetic target's gauges); None where it
    has none or does not answer."""
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=2.0) as answer:
            _, samples = read_exposition(answer.read().decode())
    except (urllib.error.URLError, OSError, ExpositionError, UnicodeDecodeError):
        return None
    names = (mn.TARGET_RUNNING.name, mn.TARGET_WAITING.name)
    found = [s.value for s in samples if s.name in names]
    return sum(found) if found else None
