"""The load worker processes of one run, and the parent's side of their protocol."""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import time
from multiprocessing.context import ForkServerContext, SpawnContext

from moeperf.collectors.serving_records import WorkerSummary
from moeperf.suites.errors import SuiteError
from moeperf.suites.serving.load.engine import LevelSink, LoadEngine
from moeperf.suites.serving.load.messages import (
    Amended,
    Failed,
    Finished,
    Health,
    LevelDone,
    Ready,
    Record,
    WorkerMessage,
)
from moeperf.suites.serving.load.plan import LevelPlan, WorkerConfig
from moeperf.suites.serving.load.worker import worker_main

_POLL_S = 0.1
# Spawning, importing and a first tokenizer load on a busy 2-core host.
_READY_TIMEOUT_S = 120.0


class WorkerFailed(SuiteError):
    """A load worker raised or died; the run cannot go on with a partial load."""


def _context() -> ForkServerContext | SpawnContext:
    """Workers fork from a server process that imported the worker's modules once
    (multiprocessing's forkserver): a fresh interpreter like spawn's, sharing nothing with
    the harness by accident, without every worker of every run importing aiohttp, uvloop
    and numpy again (~0.5 CPU-s a worker, and its start's wall time). Spawn where there is
    no forkserver (Windows)."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    context = mp.get_context("forkserver")
    context.set_forkserver_preload([worker_main.__module__])
    return context


class WorkerPool(LoadEngine):
    """The asyncio engine: starts ``size`` worker processes (forked from a clean server
    process: no state shared with the parent by accident), one event loop each."""

    # Records reach the parent through one queue per run, in process: nothing to audit.
    merges_records = False

    # Workers start a level together this long after it is planned (spawn, connect time).
    start_delay_s = 0.3

    def __init__(self, size: int, config: WorkerConfig):
        context = _context()
        self.results = context.Queue()
        self.stop_event = context.Event()
        # Raised by drop_connections(): each worker drops its connection pool (a drill).
        self._drops = context.Value("i", 0)
        # Raised by end_level(): each worker ends its running level at once.
        self._ends = context.Value("i", 0)
        self._commands = [context.Queue() for _ in range(size)]
        # Workers running a level; a stop waits for each to finish and send its records.
        self._busy: set[int] = set()
        self._processes = [
            context.Process(
                target=worker_main,
                args=(
                    i,
                    config,
                    self._commands[i],
                    self.results,
                    self.stop_event,
                    self._drops,
                    dict(os.environ),
                    self._ends,
                ),
                name=f"moeperf-load-{i}",
                daemon=True,
            )
            for i in range(size)
        ]
        for process in self._processes:
            process.start()

    def wait_ready(self, timeout_s: float | None = None) -> None:
        """Until every worker has its session and tokenizer: a level planned before that
        would see its first requests sent late (spawning takes seconds on a busy host)."""
        timeout_s = timeout_s or _READY_TIMEOUT_S
        ready: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while len(ready) < len(self._processes):
            try:
                message: WorkerMessage = self.results.get(timeout=_POLL_S)
            except queue.Empty:
                self._check_alive()
                if time.monotonic() > deadline:
                    raise WorkerFailed(f"load workers not ready after {timeout_s:.0f} s") from None
                continue
            match message:
                case Ready(worker):
                    ready.add(worker)
                case Failed(worker, trace):
                    raise WorkerFailed(f"load worker {worker} failed:\n{trace}")

    @property
    def size(self) -> int:
        return len(self._processes)

    def run_level(self, plans: dict[int, LevelPlan], sink: LevelSink) -> list[WorkerSummary]:
        """Give each worker in ``plans`` its plan; pass what they send to ``sink`` until
        every one is done."""
        for index, plan in plans.items():
            self._commands[index].put(plan)
        self._busy = set(plans)
        reports: dict[int, WorkerSummary] = {}
        while len(reports) < len(plans):
            try:
                message: WorkerMessage = self.results.get(timeout=_POLL_S)
            except queue.Empty:
                self._check_alive()
                sink.on_tick()
                continue
            match message:
                case Record(record):
                    sink.on_record(record)
                case Amended(record):
                    sink.amended(record)
                case Finished(status):
                    sink.on_finished(status)
                case Health(health):
                    sink.on_health(health)
                case LevelDone(worker, summary):
                    reports[worker] = summary
                    self._busy.discard(worker)
                case Failed(worker, trace):
                    raise WorkerFailed(f"load worker {worker} failed:\n{trace}")
        return [reports[i] for i in sorted(reports)]

    def drain(self, sink: LevelSink, timeout_s: float = 30.0) -> None:
        """After a stop: keep every record the busy workers still send, until each is done."""
        self.stop_event.set()
        deadline = time.monotonic() + timeout_s
        while self._busy and time.monotonic() < deadline:
            try:
                message: WorkerMessage = self.results.get(timeout=_POLL_S)
            except queue.Empty:
                if not any(p.is_alive() for p in self._processes):
                    break
                continue
            match message:
                case Record(record):
                    sink.on_record(record)
                case Amended(record):
                    sink.amended(record)
                case LevelDone(worker, _) | Failed(worker, _):
                    self._busy.discard(worker)

    def end_level(self) -> None:
        """Every worker ends the running level within its stop poll (50 ms): what is in
        flight is cancelled and recorded, and run_level returns; the run goes on."""
        with self._ends.get_lock():
            self._ends.value += 1

    def note(self) -> str | None:
        return None

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
