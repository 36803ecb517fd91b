"""The load worker processes of one run, and the parent's side of their protocol."""

from __future__ import annotations

import multiprocessing as mp
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass

from moeperf.collectors.records import RequestRecord
from moeperf.collectors.serving_records import WorkerSummary
from moeperf.suites.errors import SuiteError
from moeperf.suites.serving.load.plan import LevelPlan, WorkerConfig
from moeperf.suites.serving.load.worker import worker_main

_POLL_S = 0.1


@dataclass(frozen=True, slots=True)
class WorkerHealth:
    """A worker's periodic report during a level (live export)."""

    worker: int
    scenario: str
    in_flight: int
    loop_lag_p99_s: float
    cpu_ratio: float


class WorkerFailed(SuiteError):
    """A load worker raised or died; the run cannot go on with a partial load."""


class WorkerPool:
    """Starts ``size`` workers (spawned: no state shared with the parent by accident)."""

    # Workers start a level together this long after it is planned (spawn, connect time).
    start_delay_s = 0.3

    def __init__(self, size: int, config: WorkerConfig):
        context = mp.get_context("spawn")
        self.results = context.Queue()
        self.stop_event = context.Event()
        # Raised by drop_connections(): each worker drops its connection pool (a drill).
        self._drops = context.Value("i", 0)
        self._commands = [context.Queue() for _ in range(size)]
        # Workers running a level; a stop waits for each to finish and send its records.
        self._busy: set[int] = set()
        self._processes = [
            context.Process(
                target=worker_main,
                args=(i, config, self._commands[i], self.results, self.stop_event, self._drops),
                name=f"moeperf-load-{i}",
                daemon=True,
            )
            for i in range(size)
        ]
        for process in self._processes:
            process.start()

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        """Until every worker has its session and tokenizer: a level planned before that
        would see its first requests sent late (spawning takes seconds on a busy host)."""
        ready: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while len(ready) < len(self._processes):
            try:
                message = self.results.get(timeout=_POLL_S)
            except queue.Empty:
                self._check_alive()
                if time.monotonic() > deadline:
                    raise WorkerFailed(f"load workers not ready after {timeout_s:.0f} s") from None
                continue
            if message[0] == "ready":
                ready.add(message[1])
            elif message[0] == "failed":
                raise WorkerFailed(f"load worker {message[1]} failed:\n{message[2]}")

    @property
    def size(self) -> int:
        return len(self._processes)

    def run_level(
        self,
        plans: dict[int, LevelPlan],
        on_record: Callable[[RequestRecord], None],
        on_finished: Callable[[str], None] = lambda _status: None,
        on_tick: Callable[[], None] = lambda: None,
        on_health: Callable[[WorkerHealth], None] = lambda _health: None,
        on_amended: Callable[[RequestRecord], None] | None = None,
    ) -> list[WorkerSummary]:
        """Give each worker in ``plans`` its plan; pass records on until all are done.

        ``on_finished(status)`` is called as each request ends, ``on_record`` with its
        record; ``on_amended`` (default: ``on_record``) with a newer version of a record
        already passed on, when client-side token counts are added after the level (it
        changes counts, never how the request ended).
        """
        for index, plan in plans.items():
            self._commands[index].put(plan)
        self._busy = set(plans)
        reports: dict[int, WorkerSummary] = {}
        while len(reports) < len(plans):
            try:
                message = self.results.get(timeout=_POLL_S)
            except queue.Empty:
                self._check_alive()
                on_tick()
                continue
            kind = message[0]
            if kind == "record":
                on_record(message[1])
            elif kind == "amended":
                (on_amended or on_record)(message[1])
            elif kind == "finished":
                on_finished(message[1])
            elif kind == "health":
                on_health(WorkerHealth(*message[1:]))
            elif kind == "level_done":
                reports[message[1]] = message[2]
                self._busy.discard(message[1])
            elif kind == "failed":
                raise WorkerFailed(f"load worker {message[1]} failed:\n{message[2]}")
        return [reports[i] for i in sorted(reports)]

    def drain(
        self,
        on_record: Callable[[RequestRecord], None],
        timeout_s: float = 30.0,
        on_amended: Callable[[RequestRecord], None] | None = None,
    ) -> None:
        """After a stop: keep every record the busy workers still send, until each is done."""
        self.stop_event.set()
        deadline = time.monotonic() + timeout_s
        while self._busy and time.monotonic() < deadline:
            try:
                message = self.results.get(timeout=_POLL_S)
            except queue.Empty:
                if not any(p.is_alive() for p in self._processes):
                    break
                continue
            if message[0] == "record":
                on_record(message[1])
            elif message[0] == "amended":
                (on_amended or on_record)(message[1])
            elif message[0] in ("level_done", "failed"):
                self._busy.discard(message[1])

    def drop_connections(self) -> None:
        """Every worker closes its connection pool under its requests in flight (the
        drill's ``drop_pool``); they notice within their stop poll (50 ms)."""
        with self._drops.get_lock():
            self._drops.value += 1

    def _check_alive(self) -> None:
        for i, process in enumerate(self._processes):
            if not process.is_alive():
                raise WorkerFailed(f"load worker {i} died (exit code {process.exitcode})")

    def close(self) -> None:
        for commands in self._commands:
            commands.put(None)
        for process in self._processes:
            process.join(timeout=5)
            if process.is_alive():
                process.terminate()
                process.join()
