"""The Locust engine from the harness's side: a Locust master (and, with ``workers``,
local Locust workers) as child processes, behind the interface of the asyncio engine's
WorkerPool, so the runner plans, judges and stores levels the same way for both.

Nothing here imports gevent or Locust: they patch the process they are imported into,
and the harness's own process must stay as it is. The master speaks JSON lines
(suites/serving/locust_engine/master.py); a reader thread queues them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import queue
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import IO, Any

from moeperf.collectors.records import RequestRecord
from moeperf.collectors.serving_records import WorkerSummary
from moeperf.suites.errors import SuiteError
from moeperf.suites.serving.launched_server import free_port
from moeperf.suites.serving.load.engine import LevelSink, LoadEngine
from moeperf.suites.serving.load.plan import LevelPlan, WorkerConfig
from moeperf.suites.serving.locust_engine import messages

_POLL_S = 0.1
_READY_TIMEOUT_S = 180.0
_STOP_TIMEOUT_S = 10.0
_MASTER = "moeperf.suites.serving.locust_engine.master"
_WORKER = "moeperf.suites.serving.locust_engine.worker"


class LocustFailed(SuiteError):
    """The Locust master or a worker failed or died: the run cannot go on."""


@dataclass(frozen=True, slots=True)
class LocustWorker:
    """A worker as the master saw it at start: for the manifest."""

    index: int
    host: str
    offset_ns: int  # its monotonic clock minus the master's, as measured
    offset_bound_ns: int  # half the least ping round trip: the offset's uncertainty
    applied_ns: int  # what its timestamps were corrected by (0: within the bound)


class LocustPool(LoadEngine):
    """The Locust engine: ``local_workers`` Locust workers on this host (and
    ``remote_workers`` expected to connect from elsewhere to ``bind``:``port``) under one
    Locust master."""

    # Records merged from other processes, maybe other hosts: the runner audits them.
    merges_records = True

    # Spawning the users through the master takes a few of its ticks.
    start_delay_s = 1.5

    def __init__(
        self,
        config: WorkerConfig,
        local_workers: int,
        *,
        remote_workers: int = 0,
        bind: str = "127.0.0.1",
        port: int = 0,
        connect_timeout_s: float = 120.0,
        ui: bool = False,
        ui_host: str = "127.0.0.1",
        ui_port: int = 8089,
    ):
        self.config = config
        self._connect_timeout_s = connect_timeout_s
        self.workers: list[LocustWorker] = []
        self._events: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._workers: list[subprocess.Popen[Any]] = []
        self._level_running = False
        # Remote workers need a port known in advance: Locust's own default then.
        self.port = port or (5557 if remote_workers else free_port())
        expected = local_workers + remote_workers
        command = [sys.executable, "-m", _MASTER, "--bind", bind, "--port", str(self.port)]
        command += ["--workers", str(expected), "--connect-timeout-s", str(connect_timeout_s)]
        if ui:
            command += ["--ui", "--ui-host", ui_host, "--ui-port", str(ui_port)]
        self.ui_url = f"http://{ui_host}:{ui_port}" if ui else None
        self._master = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self._master.stdout is not None
        threading.Thread(
            target=self._read, args=(self._master.stdout,), name="locust-master", daemon=True
        ).start()
        self._expect("listening", _READY_TIMEOUT_S)
        worker = [sys.executable, "-m", _WORKER, "--master-host", "127.0.0.1"]
        worker += ["--master-port", str(self.port), "--exit-with-parent"]
        self._workers = [subprocess.Popen(worker) for _ in range(local_workers)]
        self._send(cmd="config", config=messages.packed(config))
        if remote_workers:
            print(
                f"Locust master waiting for {remote_workers} remote worker(s): on each machine "
                f"run `moeperf run --worker --master-host <this host> --master-port {self.port}`",
                file=sys.stderr,
                flush=True,
            )

    @property
    def size(self) -> int:
        return len(self.workers)

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            with contextlib.suppress(json.JSONDecodeError):
                self._events.put(json.loads(line))
        self._events.put(None)  # the master's stdout closed: it is gone

    def _send(self, **command: Any) -> None:
        assert self._master.stdin is not None
        try:
            self._master.stdin.write(json.dumps(command) + "\n")
            self._master.stdin.flush()
        except (BrokenPipeError, OSError):
            raise LocustFailed(f"the Locust master exited ({self._master.poll()})") from None

    def _next(self, timeout_s: float) -> dict[str, Any] | None:
        """The master's next event, or None after ``timeout_s`` without one."""
        try:
            event = self._events.get(timeout=timeout_s)
        except queue.Empty:
            self._check_alive()
            return None
        if event is None:
            raise LocustFailed(f"the Locust master exited ({self._master.wait()})")
        if event["event"] == "failed":
            raise LocustFailed(f"Locust master: {event['message']}")
        return event

    def _expect(self, kind: str, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            event = self._next(_POLL_S)
            if event is not None and event["event"] == kind:
                return event
        raise LocustFailed(f"no {kind!r} from the Locust master within {timeout_s:g} s")

    def _check_alive(self) -> None:
        if self._master.poll() is not None:
            raise LocustFailed(f"the Locust master exited ({self._master.returncode})")
        for i, worker in enumerate(self._workers):
            if worker.poll() is not None:
                raise LocustFailed(f"local Locust worker {i} died (exit code {worker.returncode})")

    def wait_ready(self, timeout_s: float | None = None) -> None:
        event = self._expect("ready", timeout_s or self._connect_timeout_s + _READY_TIMEOUT_S)
        self.workers = [
            LocustWorker(
                w["index"], w["host"], w["offset_ns"], w["offset_bound_ns"], w["applied_ns"]
            )
            for w in event["workers"]
        ]

    def run_level(self, plans: dict[int, LevelPlan], sink: LevelSink) -> list[WorkerSummary]:
        """The level of ``plans`` (the asyncio engine's per-worker shares, summed: Locust
        spreads the users itself) on every Locust worker; the summaries of those that had
        something to send (one stream on two workers: one summary). Locust users count no
        tokens client-side: no record is amended."""
        shares = list(plans.values())
        budgets = [p.max_requests for p in shares]
        total = dataclasses.replace(
            shares[0],
            concurrency=sum(p.concurrency for p in shares),
            max_requests=None if budgets[0] is None else sum(b or 0 for b in budgets),
            prompt_offset=shares[0].prompt_offset,  # where the level's prompts start
        )
        if total.mode != "concurrency":
            raise LocustFailed("the Locust engine runs closed-loop levels only")
        self._send(cmd="level", plan=messages.packed(total))
        self._level_running = True
        reports: list[WorkerSummary] = []
        while True:
            event = self._next(_POLL_S)
            if event is None:
                sink.on_tick()
            elif event["event"] == "record":
                record = RequestRecord(**event["record"])
                sink.on_finished(record.status)
                sink.on_record(record)
            elif event["event"] == "level_done":
                reports.append(messages.unpacked(event["summary"]))
            elif event["event"] == "level_end":
                self._level_running = False
                return sorted(reports, key=lambda r: r.worker)

    def drain(self, sink: LevelSink, timeout_s: float = 30.0) -> None:
        """After a stop: cancel what is in flight and keep every record still sent."""
        if not self._level_running:
            return  # stopped between levels: nothing in flight
        with contextlib.suppress(LocustFailed):
            self._send(cmd="stop")
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                event = self._next(_POLL_S)
                if event is None:
                    continue
                if event["event"] == "record":
                    sink.on_record(RequestRecord(**event["record"]))
                elif event["event"] == "level_end":
                    return

    def drop_connections(self) -> None:
        """Not on this engine: a [drill] with drop_pool is refused for Locust when the spec
        is validated, so this is never asked."""
        raise LocustFailed("the Locust engine cannot drop its workers' connections")

    def end_level(self) -> None:
        """Not on this engine: load.stop_over_saturated is refused for Locust when the spec
        is validated (Locust runs users, not an arrival schedule), so this is never asked."""
        raise LocustFailed("the Locust engine cannot end a level early")

    def note(self) -> str | None:
        return locust_note(self)

    def close(self) -> None:
        with contextlib.suppress(LocustFailed):
            self._send(cmd="quit")
        processes: list[subprocess.Popen[Any]] = [self._master, *self._workers]
        for process in processes:
            try:
                process.wait(timeout=_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def locust_note(pool: LocustPool) -> str:
    """The manifest's note on the Locust engine: its workers, their hosts and clocks."""
    import importlib.metadata

    version = importlib.metadata.version("locust")
    workers = "; ".join(
        f"worker {w.index} on {w.host}: clock offset {w.offset_ns / 1e6:+.3f} ms "
        f"+/- {w.offset_bound_ns / 1e6:.3f} ms ("
        + (
            f"applied: {w.applied_ns / 1e6:+.3f} ms"
            if w.applied_ns
            else "within its bound: none applied"
        )
        + ")"
        for w in pool.workers
    )
    ui = f"; web UI at {pool.ui_url}" if pool.ui_url else ""
    return (
        f"Engine: Locust {version}, {len(pool.workers)} worker(s) under a master on this host "
        f"(port {pool.port}){ui}. Closed loop: each Locust user is one stream; chunk times "
        f"are taken as each read of the socket returns (http.client on gevent). {workers}."
    )
