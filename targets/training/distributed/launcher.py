"""Start a job's ranks, watch them, kill one on request, restart the job when a rank dies.

What torchrun's elastic agent does for one host: every rank is a process (``worker.py``)
given torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1, a free MASTER_PORT)
and a rendezvous file (a FileStore: no port open beyond gloo's, which bind loopback);
the launcher polls them every ``POLL_S``. When one exits with an error, the others are
stopped (they would wait in a collective for a peer that is gone) and, for an OOM or a
killed rank, the whole job starts again from the newest complete sharded checkpoint, up to
``max_restarts`` times; any other failure ends the job with the rank's log.

A ``KillRank`` fault is the training fault drill: once rank ``rank`` has reported step
``after_step``, it gets SIGKILL mid-way through the next. The recovery is measured: time
to detect (the kill to the launcher noticing), time to resume (noticing to the job's first
step completed again), steps replayed, and each replayed step's loss against the original's.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch

from moeperf.targets.training.distributed.rank_step import (
    RankEvent,
    RankStep,
    read_line,
    records_path,
)
from moeperf.targets.training.distributed.rank_trainer import DistConfig
from moeperf.targets.training.distributed.worker import CONFIG_EXIT, OOM_EXIT, STORE_FILE_ENV

POLL_S = 0.01
STOP_GRACE_S = 5.0  # SIGTERM, then SIGKILL after this long

Cause = Literal["oom", "killed", "crash"]


@dataclass(frozen=True)
class KillRank:
    """SIGKILL ``rank`` once it has reported step ``after_step`` (during the step after it),
    ``delay_s`` later. Once per job."""

    rank: int
    after_step: int
    delay_s: float = 0.0


@dataclass
class Recovery:
    """One failure of the job and how it came back."""

    cause: Cause
    rank: int
    attempt: int  # the attempt that failed
    failed_ns: int  # the kill sent (a drill) or the failing rank's last word (an OOM)
    detected_ns: int  # the launcher saw the process gone
    step: int  # the step the job was in
    restored_step: int | None = None  # the checkpoint the next attempt started from
    resumed_ns: int | None = None  # the next attempt's first step completed on every rank
    steps_replayed: int = 0  # steps done before the failure and done again
    message: str = ""
    exit_code: int | None = None

    @property
    def detect_s(self) -> float:
        return (self.detected_ns - self.failed_ns) / 1e9

    @property
    def resume_s(self) -> float | None:
        return None if self.resumed_ns is None else (self.resumed_ns - self.detected_ns) / 1e9


@dataclass
class JobResult:
    attempts: int = 0
    completed: bool = False
    stopped: str = ""  # why the job ended early (the launcher gave up), "" when it completed
    recoveries: list[Recovery] = field(default_factory=list)
    steps: list[RankStep] = field(default_factory=list)
    events: list[RankEvent] = field(default_factory=list)


class LaunchError(RuntimeError):
    """The job failed in a way a restart does not fix (its rank's log is in the message)."""


class LaunchConfigError(LaunchError):
    """A rank refused the configuration (exit code 2): the message is the rank's."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def prepare_token_stream(config: DistConfig) -> DistConfig:
    """Tokenize the corpus once for every rank and attempt (a saved tensor they load)."""
    if config.trainer.token_stream_path is not None:
        return config
    from moeperf.targets.training.setup import _model, training_stream

    _, tokenizer = _model(dataclasses.replace(config.trainer, token_stream_path=None))
    assert tokenizer is not None
    path = Path(config.out_dir) / "tokens.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(training_stream(tokenizer), path)
    trainer = dataclasses.replace(config.trainer, token_stream_path=str(path))
    return dataclasses.replace(config, trainer=trainer)


class _Tail:
    """New complete lines of every rank's records file."""

    def __init__(self, directory: Path, world_size: int):
        self.paths = [records_path(directory, r) for r in range(world_size)]
        self.offsets = [0] * world_size

    def read(self) -> list[RankStep | RankEvent]:
        found: list[RankStep | RankEvent] = []
        for i, path in enumerate(self.paths):
            if not path.exists():
                continue
            with path.open("rb") as f:
                f.seek(self.offsets[i])
                data = f.read()
            end = data.rfind(b"\n") + 1  # a line being written waits for its newline
            self.offsets[i] += end
            found += [read_line(line) for line in data[:end].decode().splitlines() if line]
        return found


def launch(
    config: DistConfig,
    *,
    fault: KillRank | None = None,
    max_restarts: int = 10,
    on_record: Callable[[RankStep | RankEvent], None] = lambda _r: None,
    clock: Callable[[], int] = time.monotonic_ns,
) -> JobResult:
    """Run the job in ``config`` to its last step (restarting it as needed)."""
    Path(config.out_dir).mkdir(parents=True, exist_ok=True)
    job = _Job(prepare_token_stream(config), fault, on_record, clock)
    try:
        while True:
            failed = job.attempt()
            if failed is None:
                job.result.completed = True
                return job.result
            job.result.recoveries.append(failed)
            if failed.cause == "crash":
                if failed.exit_code == CONFIG_EXIT:
                    raise LaunchConfigError(_last_error(failed.message))
                raise LaunchError(f"rank {failed.rank} failed: {failed.message}")
            if len(job.result.recoveries) > max_restarts:
                job.result.stopped = (
                    f"stopped after {len(job.result.recoveries)} failures "
                    f"(max_restarts {max_restarts}); last: {failed.message}"
                )
                return job.result
    except BaseException:  # Ctrl-C, or a bug here: no rank outlives the launcher
        _stop(job.procs)
        raise


class _Job:
    """One job across its attempts: what its ranks reported, and the drill still to come."""

    def __init__(
        self,
        config: DistConfig,
        fault: KillRank | None,
        on_record: Callable[[RankStep | RankEvent], None],
        clock: Callable[[], int],
    ):
        self.config, self.fault, self.on_record, self.clock = config, fault, on_record, clock
        self.out = Path(config.out_dir)
        self.world = config.layout.world_size
        self.tail = _Tail(self.out / "records", self.world)
        self.result = JobResult()
        self.done_by_rank = [0] * self.world  # steps each rank has completed (high water)
        self.skip: set[int] = set(config.skip_samples)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.kill_at_ns: int | None = None
        self.killed: tuple[int, int] | None = None  # (rank, when) the drill sent SIGKILL
        self._first_step: dict[int, int] = {}  # rank -> end of its first step this attempt

    def attempt(self) -> Recovery | None:
        """Start every rank and watch them: None when all finish, else the failure (every
        rank stopped, its records read)."""
        result = self.result
        config = dataclasses.replace(
            self.config,
            attempt=result.attempts,
            skip_samples=tuple(sorted(self.skip)),
            replayed_below=min(self.done_by_rank) if result.attempts else 0,
        )
        self.procs = _start(config, self.out)
        result.attempts += 1
        self._first_step = {}
        self.killed = None
        while True:
            self._read()
            self._maybe_kill()
            codes = [p.poll() for p in self.procs]
            if all(code == 0 for code in codes):
                self._read()
                return None
            bad = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if bad:
                failed = self._failure(bad, config)
                _stop(self.procs)
                self._read()
                for event in result.events:
                    if event.kind == "oom" and event.attempt == config.attempt:
                        # The failed step's batch is skipped, as a job skips what crashed it.
                        self.skip.update(event.detail["samples"])
                return failed
            time.sleep(POLL_S)

    def _read(self) -> None:
        recovery = self.result.recoveries[-1] if self.result.recoveries else None
        for record in self.tail.read():
            self.on_record(record)
            if isinstance(record, RankEvent):
                self.result.events.append(record)
                if record.kind == "restored" and recovery is not None:
                    recovery.restored_step = record.step
                    recovery.steps_replayed = max(recovery.step - record.step, 0)
                continue
            self.result.steps.append(record)
            self.done_by_rank[record.rank] = max(self.done_by_rank[record.rank], record.step + 1)
            self._first_step.setdefault(record.rank, record.end_ns)
            resuming = recovery is not None and recovery.resumed_ns is None
            if resuming and len(self._first_step) == self.world:
                assert recovery is not None
                recovery.resumed_ns = max(self._first_step.values())
            fault = self.fault
            if (
                fault is not None
                and (record.rank, self.kill_at_ns) == (fault.rank, None)
                and record.step >= fault.after_step
            ):
                self.kill_at_ns = self.clock() + int(fault.delay_s * 1e9)

    def _maybe_kill(self) -> None:
        fault = self.fault
        if fault is None or self.kill_at_ns is None or self.clock() < self.kill_at_ns:
            return
        self.killed = (fault.rank, self.clock())
        self.procs[fault.rank].send_signal(signal.SIGKILL)
        self.fault, self.kill_at_ns = None, None  # once per job

    def _failure(self, bad: list[tuple[int, int]], config: DistConfig) -> Recovery:
        detected_ns = self.clock()
        killed = self.killed
        # The cause first: the rank killed, out of memory or refusing the config; a peer
        # that then failed in a collective (exit code 1) is a consequence.
        rank, code = min(
            bad,
            key=lambda rc: (
                killed is None or rc[0] != killed[0],
                rc[1] not in (OOM_EXIT, CONFIG_EXIT),
                rc[1] > 0,
            ),
        )
        self._read()  # the failing rank's last words (an OOM's samples)
        step = min(self.done_by_rank)
        if killed is not None and killed[0] == rank:
            return Recovery("killed", rank, config.attempt, killed[1], detected_ns, step,
                            message="SIGKILL (training.faults drill)")  # fmt: skip
        if code == OOM_EXIT:
            ooms = [e for e in self.result.events
                    if e.kind == "oom" and e.attempt == config.attempt]  # fmt: skip
            if ooms:
                first = min(ooms, key=lambda e: e.at_ns)
                return Recovery("oom", first.rank, config.attempt, first.at_ns, detected_ns,
                                first.step, message=first.detail["message"])  # fmt: skip
            return Recovery("oom", rank, config.attempt, detected_ns, detected_ns, step,
                            message="out of memory")  # fmt: skip
        if code < 0:
            return Recovery("killed", rank, config.attempt, detected_ns, detected_ns, step,
                            message=f"killed by signal {-code}")  # fmt: skip
        log = _log_path(self.out, config.attempt, rank)
        tail_text = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        return Recovery("crash", rank, config.attempt, detected_ns, detected_ns, step,
                        message=f"exit code {code}\n{tail_text}", exit_code=code)  # fmt: skip


def _last_error(log_text: str) -> str:
    """The ``error: ...`` line a rank printed before exiting with CONFIG_EXIT."""
    lines = [line for line in log_text.splitlines() if line.startswith("error: ")]
    return lines[-1].removeprefix("error: ") if lines else log_text


def _log_path(out: Path, attempt: int, rank: int) -> Path:
    return out / "logs" / f"attempt-{attempt:03d}.rank-{rank:05d}.log"


def _start(config: DistConfig, out: Path) -> list[subprocess.Popen[bytes]]:
    path = out / f"launch-{config.attempt:03d}.json"
    path.write_text(config.to_json())
    port = free_port()  # torchrun's contract; the ranks meet through ``store`` instead
    store = out / f"store-{config.attempt:03d}"
    store.unlink(missing_ok=True)  # a FileStore's file must start empty
    procs = []
    for rank in range(config.layout.world_size):
        env = {
            **os.environ,
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(config.layout.world_size),
            "LOCAL_WORLD_SIZE": str(config.layout.world_size),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            STORE_FILE_ENV: str(store),
            "GLOO_SOCKET_IFNAME": "lo",  # gloo's connections over loopback only
            "OMP_NUM_THREADS": str(config.trainer.threads),
        }
        log = _log_path(out, config.attempt, rank)
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("wb") as log_file:
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "moeperf.targets.training.distributed.worker",
                        str(path),
                    ],
                    env=env,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                )
            )
    return procs


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + STOP_GRACE_S
    for p in procs:
        try:
            p.wait(timeout=max(deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
