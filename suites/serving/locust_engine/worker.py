"""``python -m moeperf.suites.serving.locust_engine.worker --master-host H --master-port P``: a
Locust worker of the moeperf engine. It answers the master's clock pings, takes the run's
config, runs each level's share with its users (user.py, level.py), sends its records to
the master as they end (every 100 ms) and its summary when the level is done.

A local worker is started by the harness (``moeperf run --engine locust --workers N``);
on another machine, ``moeperf locust-worker --master-host H`` starts this.
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()  # before anything imports socket or threading (Locust does it too)

import argparse  # noqa: E402
import os  # noqa: E402
import socket  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from typing import Any  # noqa: E402

import gevent  # noqa: E402
from locust.env import Environment  # noqa: E402

from moeperf.collectors.records import RequestRecord  # noqa: E402
from moeperf.suites.serving.locust_engine import messages  # noqa: E402
from moeperf.suites.serving.locust_engine.level import RunningLevel, WorkerRun  # noqa: E402
from moeperf.suites.serving.locust_engine.user import STATE, StreamUser  # noqa: E402

_FLUSH_S = 0.1
_PARENT_POLL_S = 0.5


class _Worker:
    def __init__(self, env: Environment):
        self.env = env
        self.runner = env.runner
        assert self.runner is not None
        self.run: WorkerRun | None = None
        self.pending: list[dict[str, Any]] = []
        gevent.spawn(self._flusher)

    def send(self, kind: str, data: dict[str, Any]) -> None:
        assert self.runner is not None
        self.runner.send_message(kind, data)

    def on_ping(self, environment: Any, msg: Any, **_: Any) -> None:
        self.send(
            messages.PONG,
            {"t0": msg.data["t0"], "t1": time.monotonic_ns(), "host": socket.gethostname()},
        )

    def on_config(self, environment: Any, msg: Any, **_: Any) -> None:
        self.run = messages.unpacked(msg.data["run"])
        self.send(messages.CONFIGURED, {})

    def on_level(self, environment: Any, msg: Any, **_: Any) -> None:
        assert self.run is not None
        level = RunningLevel(self.run, messages.unpacked(msg.data["plan"]), self.keep)
        level.watch.start()
        STATE.level = level
        gevent.spawn(self._finish_level, level)

    def on_stop(self, environment: Any, msg: Any, **_: Any) -> None:
        if STATE.level is not None:
            STATE.level.stop_now()

    def keep(self, record: RequestRecord) -> None:
        self.pending.append(record.to_dict())

    def _finish_level(self, level: RunningLevel) -> None:
        summary = level.wait_done()
        STATE.level = None
        self._flush()  # every record before the summary: one socket, in order
        self.send(messages.LEVEL_DONE, {"summary": messages.packed(summary)})

    def _flush(self) -> None:
        if self.pending:
            batch, self.pending = self.pending, []
            self.send(messages.RECORDS, {"records": batch})

    def _flusher(self) -> None:
        while True:
            gevent.sleep(_FLUSH_S)
            self._flush()


def _exit_with_parent(parent_pid: int) -> None:
    # Started by the harness: a harness that is gone leaves no worker behind.
    while os.getppid() == parent_pid:
        gevent.sleep(_PARENT_POLL_S)
    os._exit(3)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m moeperf.suites.serving.locust_engine.worker")
    parser.add_argument("--master-host", default="127.0.0.1")
    parser.add_argument("--master-port", type=int, default=5557)
    parser.add_argument("--exit-with-parent", action="store_true")
    args = parser.parse_args(argv)
    env = Environment(user_classes=[StreamUser])
    env.create_worker_runner(args.master_host, args.master_port)
    worker = _Worker(env)
    assert env.runner is not None
    for kind, handler in (
        (messages.PING, worker.on_ping),
        (messages.CONFIG, worker.on_config),
        (messages.LEVEL, worker.on_level),
        (messages.STOP, worker.on_stop),
    ):
        env.runner.register_message(kind, handler)
    if args.exit_with_parent:
        gevent.spawn(_exit_with_parent, os.getppid())
    env.runner.greenlet.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
