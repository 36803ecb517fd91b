"""``python -m moeperf.suites.serving.locust_engine.master``: the Locust master of a moeperf run,
started by the harness (suites/serving/locust_pool.py), which it answers on stdout.

It waits for its workers, measures each one's clock offset (ping-pong, the least
round trip of several), hands each the run's config, then runs the levels the harness
sends: users spawned across the workers (Locust's dispatcher, evenly), each worker with
something to send told its share (its users, its part of the request budget), records
passed on as they come, and those workers' summaries at the level's end. With ``--ui``,
Locust's web UI on 127.0.0.1 (``--ui-host`` to put it elsewhere).

stdin, one JSON object per line: {"cmd": "config", "config": packed WorkerConfig},
{"cmd": "level", "plan": packed LevelPlan (concurrency and max_requests: the level's
totals)}, {"cmd": "stop"}, {"cmd": "quit"}.
stdout, one per line: {"event": "ready", "workers": [...]}, {"event": "record", ...},
{"event": "level_done", "summary": packed WorkerSummary}, {"event": "level_end"},
{"event": "failed", "message": ...}.
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from typing import Any  # noqa: E402

import gevent  # noqa: E402
from gevent.fileobject import FileObjectThread  # noqa: E402
from locust.argument_parser import get_parser  # noqa: E402
from locust.env import Environment  # noqa: E402
from locust.runners import MasterRunner  # noqa: E402

from moeperf.suites.serving.load.plan import LevelPlan, WorkerConfig  # noqa: E402
from moeperf.suites.serving.locust_engine import messages  # noqa: E402
from moeperf.suites.serving.locust_engine.level import WorkerRun  # noqa: E402
from moeperf.suites.serving.locust_engine.user import StreamUser  # noqa: E402

_PINGS = 7
_POLL_S = 0.01
_SPAWN_TIMEOUT_S = 60.0
# A ping not answered by then is sent again: a worker that has just joined may get the
# first before its handlers are registered, and Locust drops a message it has no handler
# for ("Unknown message type received"; seen on a busy 2-core host).
_PING_RESEND_S = 1.0


def _say(**event: Any) -> None:
    sys.stdout.write(json.dumps(event, separators=(",", ":")) + "\n")
    sys.stdout.flush()


class _Master:
    def __init__(self, env: Environment, expected: int, connect_timeout_s: float):
        self.env = env
        runner = env.runner
        assert isinstance(runner, MasterRunner)
        self.runner = runner
        self.expected = expected
        self.connect_timeout_s = connect_timeout_s
        self.order: list[str] = []  # worker client ids, in index order
        self.pongs: dict[str, list[tuple[int, int, int]]] = {}
        self.hosts: dict[str, str] = {}
        self.configured: set[str] = set()
        self.done: dict[str, Any] = {}
        self.config: WorkerConfig | None = None
        for kind, handler in (
            (messages.PONG, self.on_pong),
            (messages.CONFIGURED, self.on_configured),
            (messages.RECORDS, self.on_records),
            (messages.LEVEL_DONE, self.on_level_done),
        ):
            runner.register_message(kind, handler)

    # -- messages from workers ----------------------------------------------------------

    def on_pong(self, environment: Any, msg: Any, **_: Any) -> None:
        t2 = time.monotonic_ns()
        self.pongs.setdefault(msg.node_id, []).append((msg.data["t0"], msg.data["t1"], t2))
        self.hosts[msg.node_id] = msg.data["host"]

    def on_configured(self, environment: Any, msg: Any, **_: Any) -> None:
        self.configured.add(msg.node_id)

    def on_records(self, environment: Any, msg: Any, **_: Any) -> None:
        for record in msg.data["records"]:
            _say(event="record", record=record)

    def on_level_done(self, environment: Any, msg: Any, **_: Any) -> None:
        self.done[msg.node_id] = msg.data["summary"]
        _say(event="level_done", summary=msg.data["summary"])

    # -- commands from the harness ------------------------------------------------------

    def configure(self, config: WorkerConfig) -> None:
        self.config = config
        deadline = time.monotonic() + self.connect_timeout_s
        while len(self.runner.clients.ready) < self.expected:
            if time.monotonic() > deadline:
                have = len(self.runner.clients.ready)
                raise RuntimeError(
                    f"{have} of {self.expected} Locust workers connected within "
                    f"{self.connect_timeout_s:g} s"
                )
            gevent.sleep(_POLL_S)
        self.order = sorted(node.id for node in self.runner.clients.ready)
        described = []
        for index, node_id in enumerate(self.order):
            offset_ns, bound_ns = self._clock_offset(node_id)
            # Applied only when it is more than its own uncertainty (another host's clock);
            # on this host the clocks are one and the estimate is noise within the bound.
            applied_ns = offset_ns if abs(offset_ns) > bound_ns else 0
            run = WorkerRun(config, index, applied_ns)
            self.runner.send_message(messages.CONFIG, {"run": messages.packed(run)}, node_id)
            described.append(
                {"index": index, "id": node_id, "host": self.hosts.get(node_id, "?"),
                 "offset_ns": offset_ns, "offset_bound_ns": bound_ns,
                 "applied_ns": applied_ns}
            )  # fmt: skip
        self._wait(lambda: len(self.configured) == len(self.order), "workers configured")
        _say(event="ready", workers=described)

    def _clock_offset(self, node_id: str) -> tuple[int, int]:
        """Its clock minus ours, from the ping with the least round trip (NTP's estimate:
        the offset is bounded by half that round trip)."""
        self.pongs[node_id] = []
        deadline = time.monotonic() + _SPAWN_TIMEOUT_S
        for _ in range(_PINGS):
            count = len(self.pongs[node_id])
            while True:
                self.runner.send_message(messages.PING, {"t0": time.monotonic_ns()}, node_id)
                if self._answered(lambda c=count: len(self.pongs[node_id]) > c, _PING_RESEND_S):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError("timed out waiting for a clock ping")
        # Every pong carries its own ping's t0, so one of a resent ping is a sample too.
        t0, t1, t2 = min(self.pongs[node_id], key=lambda p: p[2] - p[0])
        return t1 - (t0 + t2) // 2, (t2 - t0) // 2

    def level(self, plan: LevelPlan) -> None:
        """Spawn the level's users, tell each worker that has a share its share, wait for
        their summaries. A worker without users or requests (one stream on two workers)
        sends nothing: it is not told the level, and no summary of it is waited for (its
        own watch over an empty level would judge nothing but noise)."""
        self.done = {}
        total = plan.concurrency
        # Fast, within Locust's advice (it warns past 100 users a second per worker).
        self.runner.start(total, spawn_rate=100 * len(self.order))
        self._wait(lambda: self._user_counts() is not None, "the level's users to spawn")
        counts = self._user_counts() or {}
        users = [counts[i] for i in self.order]
        budgets = (
            _proportional(plan.max_requests, users)
            if plan.max_requests is not None
            else [None] * len(self.order)
        )
        assert self.config is not None
        size = plan.prompt_count or len(self.config.prompts)
        # Each worker starts its own part of the prompts, from the level's offset, as the
        # asyncio workers do: its requests' worth after the workers before it (a
        # count-bound level), or a part as large as its share of the users.
        spans = budgets if plan.max_requests is not None else _proportional(size, users)
        starts = list(itertools.accumulate([0, *(span or 0 for span in spans)]))
        sending = [i for i, node in enumerate(self.order) if counts[node] and budgets[i] != 0]
        for index in sending:
            share = dataclasses.replace(
                plan,
                concurrency=users[index],
                max_requests=budgets[index],
                prompt_offset=(plan.prompt_offset + starts[index]) % size,
            )
            message = {"plan": messages.packed(share)}
            self.runner.send_message(messages.LEVEL, message, self.order[index])
        # A level lasts its window (a count-bound one's: its safety limit) and its drain.
        last_s = (plan.start_ns - time.monotonic_ns()) / 1e9 + plan.duration_s
        self._wait(lambda: len(self.done) == len(sending), "every worker's level summary",
                   max(0.0, last_s) + plan.drain_timeout_s + _SPAWN_TIMEOUT_S)  # fmt: skip
        _say(event="level_end")

    def _user_counts(self) -> dict[str, int] | None:
        counts = {
            node.id: sum(node.user_classes_count.values()) for node in self.runner.clients.values()
        }
        if sum(counts.get(i, 0) for i in self.order) != self.runner.target_user_count:
            return None
        return counts

    def stop(self) -> None:
        self.runner.send_message(messages.STOP, {})

    def _wait(self, condition: Any, what: str, timeout_s: float = _SPAWN_TIMEOUT_S) -> None:
        if not self._answered(condition, timeout_s):
            raise RuntimeError(f"timed out waiting for {what}")

    @staticmethod
    def _answered(condition: Any, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() > deadline:
                return False
            gevent.sleep(_POLL_S)
        return True


def _proportional(total: int, weights: list[int]) -> list[int]:
    """``total`` split over ``weights`` (largest remainders), summing exactly to it."""
    weight_sum = sum(weights) or 1
    exact = [total * w / weight_sum for w in weights]
    shares = [int(x) for x in exact]
    order = sorted(range(len(weights)), key=lambda i: exact[i] - shares[i], reverse=True)
    for i in order[: total - sum(shares)]:
        shares[i] += 1
    return shares


def _commands(master: _Master) -> None:
    stdin = FileObjectThread(sys.stdin.buffer)
    for line in stdin:
        command = json.loads(line)
        try:
            if command["cmd"] == "config":
                master.configure(messages.unpacked(command["config"]))
            elif command["cmd"] == "level":
                gevent.spawn(_level, master, messages.unpacked(command["plan"]))
            elif command["cmd"] == "stop":
                master.stop()
            elif command["cmd"] == "quit":
                break
        except RuntimeError as exc:
            _say(event="failed", message=str(exc))
    master.runner.quit()


def _level(master: _Master, plan: LevelPlan) -> None:
    try:
        master.level(plan)
    except RuntimeError as exc:
        _say(event="failed", message=str(exc))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m moeperf.suites.serving.locust_engine.master")
    parser.add_argument("--bind", default="127.0.0.1", help="where workers connect")
    parser.add_argument("--port", type=int, default=5557)
    parser.add_argument("--workers", type=int, required=True, help="workers to wait for")
    parser.add_argument("--connect-timeout-s", type=float, default=120.0)
    parser.add_argument("--ui", action="store_true")
    parser.add_argument("--ui-host", default="127.0.0.1")
    parser.add_argument("--ui-port", type=int, default=8089)
    args = parser.parse_args(argv)
    # Locust's defaults, given here: its web UI parses the process's command line (and
    # reads locust.conf or a pyproject.toml) for its settings, and ours are not Locust's.
    sys.argv = sys.argv[:1]
    defaults = get_parser(default_config_files=()).parse_args([])
    env = Environment(user_classes=[StreamUser], parsed_options=defaults)
    env.create_master_runner(args.bind, args.port)
    if args.ui:
        env.create_web_ui(args.ui_host, args.ui_port)
    master = _Master(env, args.workers, args.connect_timeout_s)
    _say(event="listening", pid=os.getpid())
    _commands(master)
    return 0


if __name__ == "__main__":
    sys.exit(main())
