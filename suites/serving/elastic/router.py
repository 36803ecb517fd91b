"""The router in front of a set of replicas: SGLang's model gateway (``sglang-router`` on
PyPI, the ``elastic`` extra), started as a child process on 127.0.0.1.

Why this one (checked here, 2026-12-07, against the reference target's OpenAI API): it
streams completions and chat through unchanged, usage and ``[DONE]`` included; it adds and
removes workers while it runs (``POST /workers``, ``DELETE /workers/{id}``) and lists them
with their health (``GET /workers``); it counts each worker's requests on its own
Prometheus page (``smg_worker_cb_outcomes_total{worker=...}``), which gives each replica's
share; and its health checks and retries are settings, so a misconfigured router (one that
keeps sending to a dead backend) can be planted. vLLM's router (``vllm-router``) is a fork
of it with the same worker API; HAProxy or nginx would need their configuration rewritten
and reloaded for every scale event.
"""

from __future__ import annotations

import importlib.metadata
import json
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from prometheus_client.parser import text_string_to_metric_families

from moeperf.suites.errors import TargetError
from moeperf.suites.serving.launched_server import LaunchedServer, NotReady, free_port

Policy = Literal["round_robin", "random", "cache_aware", "power_of_two"]
_POLL_S = 0.1
_HTTP_TIMEOUT_S = 5.0
_TAIL_CHARS = 1500
# Its per-worker outcome counter: one sample per worker and outcome (success, failure).
_OUTCOMES = "smg_worker_cb_outcomes"


@dataclass(frozen=True, slots=True)
class RouterWorker:
    """A backend as the router lists it."""

    url: str
    id: str
    healthy: bool
    load: int  # the router's count of its requests in flight


@dataclass(frozen=True)
class RouterSettings:
    """How the router is started."""

    policy: Policy = "round_robin"
    # Health checks of each worker: how often, and how many failures mark it unhealthy.
    health_check_interval_s: int = 1
    health_failure_threshold: int = 2
    # Off: the router keeps sending to a backend that died (a planted misconfiguration).
    health_checks: bool = True
    # Off: a request that fails on one worker is not retried on another.
    retries: bool = True
    # After 10 failures a worker's circuit breaker opens: no request goes to it for this
    # long (the router's default, 60 s, outlasts a restart).
    breaker_timeout_s: int = 60
    startup_timeout_s: float = 60.0


class Router:
    """The router, started on free ports with ``workers`` as its backends, until ``close``."""

    def __init__(self, workers: list[str], settings: RouterSettings | None = None):
        settings = settings or RouterSettings()
        self.settings = settings
        port, self.metrics_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{port}"
        argv = [
            sys.executable, "-m", "sglang_router.launch_router", "--host", "127.0.0.1",
            "--port", str(port), "--policy", settings.policy, "--prometheus-host",
            "127.0.0.1", "--prometheus-port", str(self.metrics_port), "--log-level", "warn",
            "--health-check-interval-secs", str(settings.health_check_interval_s),
            "--health-failure-threshold", str(settings.health_failure_threshold),
            "--cb-timeout-duration-secs", str(settings.breaker_timeout_s),
            "--worker-urls", *workers,
        ]  # fmt: skip
        if not settings.health_checks:
            argv.append("--disable-health-check")
        if not settings.retries:
            argv.append("--disable-retries")
        try:
            self._server = LaunchedServer(argv)
        except OSError as exc:
            raise TargetError(f"could not start the router (sglang-router): {exc}") from None
        try:
            wanted = set(workers)
            self._wait(
                lambda listed: {w.url for w in listed if w.healthy} >= wanted,
                settings.startup_timeout_s,
                f"listing its {len(workers)} workers healthy",
            )
        except BaseException:
            self.close()
            raise

    @property
    def pid(self) -> int:
        return self._server.pid

    @property
    def detection_s(self) -> float:
        """How long a dead worker may still get requests: health checks this far apart,
        this many failing in a row (0 without health checks: it never notices)."""
        settings = self.settings
        if not settings.health_checks:
            return 0.0
        return float(settings.health_check_interval_s * settings.health_failure_threshold)

    def describe(self) -> str:
        """What routes, in words, for the manifest and the report."""
        settings = self.settings
        checks = (
            f"health checks every {settings.health_check_interval_s} s"
            if settings.health_checks
            else "no health checks"
        )
        retries = "retries on" if settings.retries else "no retries"
        version = importlib.metadata.version("sglang-router")
        return (
            f"sglang-router {version}, {settings.policy}, {checks}, {retries}, breaker "
            f"{settings.breaker_timeout_s} s"
        )

    @property
    def alive(self) -> bool:
        return self._server.alive

    def workers(self) -> list[RouterWorker]:
        """The backends it lists now; empty while it does not answer."""
        try:
            with urllib.request.urlopen(self.url + "/workers", timeout=_HTTP_TIMEOUT_S) as answer:
                listed = json.load(answer)["workers"]
        except (urllib.error.URLError, OSError, ValueError, KeyError):
            return []
        return [
            RouterWorker(w["url"], w["id"], bool(w["is_healthy"]), int(w.get("load", 0)))
            for w in listed
        ]

    def add(self, url: str, timeout_s: float) -> None:
        """Register ``url`` and wait until the router lists it healthy."""
        self._call("POST", "/workers", {"url": url})
        self._wait(lambda listed: any(w.url == url and w.healthy for w in listed), timeout_s,
                   f"listing {url} healthy")  # fmt: skip

    def remove(self, url: str, timeout_s: float) -> None:
        """Deregister ``url`` (no new requests go to it) and wait until it is not listed."""
        found = [w for w in self.workers() if w.url == url]
        if not found:
            raise TargetError(f"the router does not list {url}")
        self._call("DELETE", f"/workers/{found[0].id}", None)
        self._wait(lambda listed: all(w.url != url for w in listed), timeout_s,
                   f"no longer listing {url}")  # fmt: skip

    def served(self) -> dict[str, float]:
        """Requests each worker has answered so far (its outcome counter, successes and
        failures together), by worker URL, from the router's own page."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=_HTTP_TIMEOUT_S) as answer:
            text = answer.read().decode()
        counts: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            if family.name != _OUTCOMES:
                continue
            for sample in family.samples:
                if sample.name == _OUTCOMES + "_total":
                    worker = sample.labels["worker"]
                    counts[worker] = counts.get(worker, 0.0) + sample.value
        return counts

    def close(self) -> None:
        self._server.stop()

    def _call(self, method: str, path: str, body: dict[str, str] | None) -> None:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path, data=data, method=method,
            headers={"content-type": "application/json"},
        )  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=_HTTP_TIMEOUT_S):
                pass
        except (urllib.error.URLError, OSError) as exc:
            raise TargetError(f"the router refused {method} {path}: {exc}") from None

    def _wait(
        self, done: Callable[[list[RouterWorker]], bool], timeout_s: float, what: str
    ) -> None:
        try:
            self._server.wait_until(lambda: True if done(self.workers()) else None, timeout_s,
                                    _POLL_S)  # fmt: skip
        except NotReady as exc:
            raise TargetError(
                f"the router ({self.url}) was not {what} ({exc}): {self._server.tail(_TAIL_CHARS)}"
            ) from None
