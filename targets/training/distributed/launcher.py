"""Start a job's ranks, watch them, kill one on request, restart the job when a rank dies.

What torchrun's elastic agent does for one host: every rank is a process (``worker.py``)
given torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1, a free MASTER_PORT);
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

from targets.training.distributed.rank_step import RankEvent, RankStep, read_line, records_path
from targets.training.distributed.rank_trainer import DistConfig
from targets.training.distributed.worker import CONFIG_EXIT, OOM_EXIT

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
    from targets.training.setup import _model, training_stream

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
    out = Path(config.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = prepare_token_stream(config)
    world = config.layout.world_size
    tail = _Tail(out / "records", world)
    result = JobResult()
    done_by_rank = [0] * world  # steps each rank has completed (its high-water mark)
    skip: set[int] = set(config.skip_samples)
    pending_fault = fault
    while True:
        attempt_config = dataclasses.replace(
            config,
            attempt=result.attempts,
            skip_samples=tuple(sorted(skip)),
            replayed_below=min(done_by_rank) if result.attempts else 0,
        )
        procs = _start(attempt_config, out)
        result.attempts += 1
        recovery = result.recoveries[-1] if result.recoveries else None
        first_step_seen: dict[int, int] = {}  # rank -> end of its first step this attempt
        kill_at_ns: int | None = None
        killed: tuple[int, int] | None = None  # (rank, when) the drill sent SIGKILL
        failed: Recovery | None = None
        while failed is None:
            for record in tail.read():
                on_record(record)
                if isinstance(record, RankStep):
                    result.steps.append(record)
                    done_by_rank[record.rank] = max(done_by_rank[record.rank], record.step + 1)
                    first_step_seen.setdefault(record.rank, record.end_ns)
                    if (
                        recovery is not None
                        and recovery.resumed_ns is None
                        and len(first_step_seen) == world
                    ):
                        recovery.resumed_ns = max(first_step_seen.values())
                    if (
                        pending_fault is not None
                        and record.rank == pending_fault.rank
                        and record.step >= pending_fault.after_step
                        and kill_at_ns is None
                    ):
                        kill_at_ns = clock() + int(pending_fault.delay_s * 1e9)
                else:
                    result.events.append(record)
                    if record.kind == "restored" and recovery is not None:
                        recovery.restored_step = record.step
                        recovery.steps_replayed = max(recovery.step - record.step, 0)
            if kill_at_ns is not None and pending_fault is not None and clock() >= kill_at_ns:
                killed = (pending_fault.rank, clock())
                procs[pending_fault.rank].send_signal(signal.SIGKILL)
                pending_fault, kill_at_ns = None, None
            codes = [p.poll() for p in procs]
            if all(code == 0 for code in codes):
                result.completed = True
                _drain(tail, result, on_record)
                return result
            bad = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if bad:
                detected_ns = clock()
                # The cause first: the rank killed, out of memory or refusing the config;
                # a peer that then failed in a collective (exit code 1) is a consequence.
                rank, code = min(
                    bad,
                    key=lambda rc: (
                        killed is None or rc[0] != killed[0],
                        rc[1] not in (OOM_EXIT, CONFIG_EXIT),
                        rc[1] > 0,
                    ),
                )
                failed = _failure(
                    rank,
                    code,
                    attempt_config,
                    detected_ns,
                    result,
                    tail,
                    on_record,
                    out,
                    min(done_by_rank),
                )
                if killed is not None and killed[0] == rank:  # the drill's kill, not a crash
                    failed.failed_ns = killed[1]
                    failed.message = "SIGKILL (training.faults drill)"
                break
            time.sleep(POLL_S)
        _stop(procs)
        _drain(tail, result, on_record)
        for event in result.events:
            if event.kind == "oom" and event.attempt == attempt_config.attempt:
                skip.update(event.detail["samples"])  # the failed step's batch, as one job skips
        result.recoveries.append(failed)
        if failed.cause == "crash":
            if failed.exit_code == CONFIG_EXIT:
                raise LaunchConfigError(_last_error(failed.message))
            raise LaunchError(f"rank {failed.rank} failed: {failed.message}")
        if len(result.recoveries) > max_restarts:
            result.stopped = (
                f"stopped after {len(result.recoveries)} failures "
                f"(max_restarts {max_restarts}); last: {failed.message}"
            )
            return result


def _failure(
    rank: int,
    code: int,
    config: DistConfig,
    detected_ns: int,
    result: JobResult,
    tail: _Tail,
    on_record: Callable[[RankStep | RankEvent], None],
    out: Path,
    step: int,
) -> Recovery:
    _drain(tail, result, on_record)
    if code == OOM_EXIT:
        oom = [e for e in result.events if e.kind == "oom" and e.attempt == config.attempt]
        first = min(oom, key=lambda e: e.at_ns) if oom else None
        return Recovery(
            "oom",
            first.rank if first else rank,
            config.attempt,
            first.at_ns if first else detected_ns,
            detected_ns,
            first.step if first else step,
            message=first.detail["message"] if first else "out of memory",
        )
    if code < 0:
        return Recovery(
            "killed",
            rank,
            config.attempt,
            detected_ns,
            detected_ns,
            step,
            message=f"killed by signal {-code}",
        )
    log = _log_path(out, config.attempt, rank)
    tail_text = log.read_text(errors="replace")[-2000:] if log.exists() else ""
    return Recovery(
        "crash",
        rank,
        config.attempt,
        detected_ns,
        detected_ns,
        step,
        message=f"exit code {code}\n{tail_text}",
        exit_code=code,
    )


def _last_error(log_text: str) -> str:
    """The ``error: ...`` line a rank printed before exiting with CONFIG_EXIT."""
    lines = [line for line in log_text.splitlines() if line.startswith("error: ")]
    return lines[-1].removeprefix("error: ") if lines else log_text


def _drain(
    tail: _Tail, result: JobResult, on_record: Callable[[RankStep | RankEvent], None]
) -> None:
    for record in tail.read():
        on_record(record)
        (result.steps if isinstance(record, RankStep) else result.events).append(record)  # type: ignore[arg-type]


def _log_path(out: Path, attempt: int, rank: int) -> Path:
    return out / "logs" / f"attempt-{attempt:03d}.rank-{rank:05d}.log"


def _start(config: DistConfig, out: Path) -> list[subprocess.Popen[bytes]]:
    path = out / f"launch-{config.attempt:03d}.json"
    path.write_text(config.to_json())
    port = free_port()
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
            "GLOO_SOCKET_IFNAME": "lo",  # gloo's connections over loopback only
            "OMP_NUM_THREADS": str(config.trainer.threads),
        }
        log = _log_path(out, config.attempt, rank)
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("wb") as log_file:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "targets.training.distributed.worker", str(path)],
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
