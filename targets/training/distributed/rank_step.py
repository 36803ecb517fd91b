"""What one rank reports of one step: a JSON line in its records file (the suite turns it
into a StepRecord), and the job's own events (checkpoints, OOMs) beside the steps."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class RankStep:
    step: int
    rank: int
    stage: int
    attempt: int  # 0 for the first launch, +1 per restart of the job
    start_ns: int  # time.monotonic_ns: one clock for every process on the host
    end_ns: int
    tokens: int  # of this rank's micro-batches (the last stage's ranks sum to the step's)
    loss: float  # mean next-token loss over the step's micro-batches, all ranks'
    model_flops: float  # this rank's share: its layers over its micro-batches' tokens
    peak_memory_bytes: int
    layers: list[int]  # the main layers this rank runs (rows of the per-layer lists)
    tokens_per_expert: list[list[int]]  # [layer][expert]: how this rank's tokens routed
    tokens_per_local_expert: list[list[int]]  # [layer][local expert]: what its experts got
    dispatched_tokens: list[int]  # [layer] token-slots sent by all-to-all (to itself too)
    received_tokens: list[int]  # [layer]
    compute_s: float  # the step less the time in communication below
    all_to_all_s: float
    pipeline_s: float
    all_reduce_s: float
    wait_s: float
    microbatch_s: float  # the 1F1B loop (forwards, backwards, their send/recv) alone
    all_to_all_bytes: int
    pipeline_bytes: int
    all_reduce_bytes: int
    samples: list[int]  # this rank's micro-batches (sample indices)
    policy_decisions: list[dict[str, Any]]
    decide_s: float
    events: list[dict[str, Any]] = field(default_factory=list)  # checkpoint, replay

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))


@dataclass(frozen=True)
class RankEvent:
    """Something a rank did or met outside a step: its build, a restore, an OOM."""

    kind: str  # "started", "restored", "oom"
    rank: int
    attempt: int
    at_ns: int
    step: int  # the step it happened at (restored: the checkpoint's)
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps({**dataclasses.asdict(self), "kind": self.kind, "event": True})


_STEP_FIELDS = frozenset(f.name for f in dataclasses.fields(RankStep))


def read_line(line: str) -> RankStep | RankEvent:
    data = json.loads(line)
    if data.pop("event", False):
        return RankEvent(**data)
    # Keys RankStep no longer has are passed over: older lines carry "kind": "step".
    return RankStep(**{k: v for k, v in data.items() if k in _STEP_FIELDS})


class RecordsFile:
    """A rank's records, one JSON line each, flushed as written (a killed rank loses nothing
    it finished)."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("a", encoding="utf-8")

    def write(self, record: RankStep | RankEvent) -> None:
        self._file.write(record.to_json() + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def records_path(directory: Path, rank: int) -> Path:
    return Path(directory) / f"rank-{rank:05d}.jsonl"
