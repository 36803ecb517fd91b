"""Per-scenario figures of a distributed training run (suite "training-dist"), the job's
view computed from every rank's step records.

Definitions (docs/guides/training-dist.md), per scenario (layout x policy x skew):

- job step time: for one step, the last rank's end less the first rank's start (the step's
  last execution, when a restart replayed it); its median over the completed steps.
- tokens/s: the step's tokens (every micro-batch of every rank) / the median job step time.
- effective tokens/s: tokens of the completed steps / the job's wall time, first launch to
  last step, restarts, replays and checkpoint writes included.
- MFU: the step's model FLOPs / (median job step time x peak FLOP/s per rank x ranks).
- time shares: each kind's seconds over all ranks and steps / the steps' seconds; compute is
  the step less all-to-all, pipeline send/recv, all-reduce and waiting (comm.py says where
  each is measured).
- bubble: the share of each stage's 1F1B loop spent in pipeline send/recv (waiting for the
  neighbouring stage included), mean over ranks and steps; beside (p - 1) / (m + p - 1).
- slowest rank: the rank with the highest median compute time (the others wait for it);
  straggler spread: (highest - lowest) / highest of the ranks' median compute times.
- OOM rate: OOM events / step attempts (job steps run, replays included, + steps an OOM
  ended).
- recovery: time to detect (the kill, or the rank's OOM, to the launcher seeing the process
  gone), time to resume (that to the job's first step completed again, on every rank),
  steps replayed, and whether each replayed step's loss equals the first run's, bit for bit.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from moeperf.collectors.accel_records import AcceleratorFigures
from moeperf.collectors.records import StepRecord
from moeperf.collectors.telemetry_records import TelemetrySummary
from moeperf.collectors.training_summary import PeakFlopsSummary

DEFINITIONS = {
    "job_step_s": "per step: last rank's end - first rank's start; median over steps",
    "tokens_per_s": "tokens of a step (all ranks) / median job step time",
    "effective_tokens_per_s": "tokens of completed steps / job wall time incl. restarts",
    "mfu": "model FLOPs of a step / (median job step time x peak per rank x ranks)",
    "shares": "seconds of each kind over all ranks and steps / the steps' seconds",
    "bubble": "pipeline send/recv share of each stage's 1F1B loop; formula (p-1)/(m+p-1)",
    "straggler_spread": "(max - min) / max of the ranks' median compute times",
    "oom_rate": "OOM events / (job steps run + steps an OOM ended)",
    "detect_s": "kill (or OOM) -> the launcher sees the process gone",
    "resume_s": "detection -> the job's first step completed again on every rank",
    "accelerator": "over the first completed job step's start to the last one's end; "
    "per token: the tokens of those steps; per step: per completed job step",
}


@dataclass(frozen=True, slots=True)
class RecoveryOutcome:
    """One failure of a job, as the launcher saw it."""

    cause: str  # "killed" (the drill or a signal), "oom"
    rank: int
    attempt: int
    step: int  # the job's completed steps when it failed
    restored_step: int | None
    steps_replayed: int
    detect_s: float
    resume_s: float | None
    message: str


@dataclass
class DistOutcome:
    """What one scenario measured (filled in by the runner as the job runs)."""

    name: str
    layout: str
    ep: int
    pp: int
    dp: int
    policy: str
    skew: str
    microbatches: int  # per step, all ranks'
    budget_bytes: int | None
    records: list[StepRecord] = field(default_factory=list)
    recoveries: list[RecoveryOutcome] = field(default_factory=list)
    attempts: int = 0
    stopped: str | None = None

    @property
    def world_size(self) -> int:
        return self.ep * self.pp * self.dp


@dataclass(frozen=True, slots=True)
class RecoverySummary:
    cause: str
    rank: int
    step: int
    restored_step: int | None
    steps_replayed: int
    detect_s: float
    resume_s: float | None
    replayed_records: int  # rank-step records run again after this failure
    replayed_losses_equal: int  # of those, bit-equal to the first run's loss
    message: str


@dataclass(frozen=True, slots=True)
class TimeShares:
    compute: float
    all_to_all: float
    pipeline: float
    all_reduce: float
    wait: float

    @property
    def communication(self) -> float:
        return self.all_to_all + self.pipeline + self.all_reduce + self.wait


@dataclass(frozen=True, slots=True)
class DistScenarioSummary:
    layout: str
    ep: int
    pp: int
    dp: int
    world_size: int
    policy: str
    skew: str
    budget_bytes: int | None
    steps: int
    attempts: int
    stopped: str | None
    job_step_s_p50: float | None
    tokens_per_s: float | None
    effective_tokens_per_s: float | None
    mfu: float | None
    shares: TimeShares | None
    bubble: float | None  # None without a pipeline
    bubble_formula: float
    peak_memory_bytes_by_rank: list[int]
    compute_s_p50_by_rank: list[float]
    slowest_rank: int | None
    straggler_spread: float | None
    ooms: int
    oom_rate: float | None
    loss_first: float | None
    loss_last: float | None
    all_to_all_bytes_per_s: float | None  # this scenario's payload bytes / its time
    recoveries: list[RecoverySummary]
    # The accelerators and the job's process tree over its completed steps ([telemetry]);
    # None: the sampler was off or read nothing then (why: the run's telemetry).
    accelerator: AcceleratorFigures | None = None


@dataclass(frozen=True, slots=True)
class LinkCalibration:
    """What the run measured of this host's links, for the cluster simulator's
    communication model (targets/cluster_sim: scale-up and scale-out bytes/s)."""

    all_to_all_bytes_per_s: float | None  # token payload bytes / all-to-all time, all ranks
    all_to_all_bytes: int
    pipeline_bytes_per_s: float | None  # a ping-pong between neighbouring stages, best of N
    pipeline_message_bytes: int | None
    all_reduce_bytes_per_s: float | None  # gradient buffer bytes / all-reduce time
    all_reduce_bytes: int


@dataclass(frozen=True, slots=True)
class DistTrainingSummary:
    SUITE: ClassVar[str] = "training-dist"

    scenarios: dict[str, DistScenarioSummary]
    peak_flops: PeakFlopsSummary  # per rank
    link: LinkCalibration
    definitions: dict[str, str] = field(default_factory=lambda: dict(DEFINITIONS))
    # The accelerator sampler ([telemetry]): its sources' status and its own cost.
    telemetry: TelemetrySummary | None = None


def _p50(values: list[float]) -> float | None:
    return float(np.median(values)) if values else None


def _last_runs(records: list[StepRecord]) -> dict[int, list[StepRecord]]:
    """Per step, each rank's record from the step's last execution."""
    latest: dict[tuple[int, int], StepRecord] = {}
    for r in records:
        key = (r.step, r.rank)
        if key not in latest or (r.attempt or 0) >= (latest[key].attempt or 0):
            latest[key] = r
    by_step: dict[int, list[StepRecord]] = defaultdict(list)
    for (step, _), r in sorted(latest.items()):
        by_step[step].append(r)
    return by_step


@dataclass(frozen=True, slots=True)
class JobStep:
    """One step of the whole job, every rank's last execution of it, on the run's clock:
    the first rank's start to the last rank's end, and the step's tokens."""

    step: int
    start_ns: int
    end_ns: int
    tokens: int
    model_flops: float
    records: list[StepRecord]

    @property
    def step_time_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9

    @property
    def peak_memory_bytes(self) -> int | None:
        """The highest rank's peak."""
        peaks = [r.peak_memory_bytes for r in self.records if r.peak_memory_bytes is not None]
        return max(peaks) if peaks else None


def job_step(records: list[StepRecord], pp: int) -> JobStep:
    """One execution of a step, from every rank's record of it (a job of ``pp`` stages)."""
    # The last stage's ranks hold every micro-batch once: their tokens are the step's.
    last_stage = pp - 1
    return JobStep(
        step=records[0].step,
        start_ns=min(r.start_ns for r in records),
        end_ns=max(r.end_ns for r in records),
        tokens=sum(r.tokens for r in records if (r.stage or 0) == last_stage),
        model_flops=sum(r.model_flops or 0.0 for r in records),
        records=records,
    )


def job_steps(outcome: DistOutcome) -> list[JobStep]:
    """The scenario's completed job steps (every rank reported the step), in step order."""
    return [
        job_step(rs, outcome.pp)
        for _, rs in sorted(_last_runs(outcome.records).items())
        if len(rs) == outcome.world_size
    ]


def _shares(records: list[StepRecord]) -> TimeShares | None:
    total = sum(r.step_time_s for r in records)
    if not total:
        return None

    def share(values: list[float | None]) -> float:
        return sum(v or 0.0 for v in values) / total

    return TimeShares(
        compute=share([r.compute_s for r in records]),
        all_to_all=share([r.all_to_all_s for r in records]),
        pipeline=share([r.pipeline_s for r in records]),
        all_reduce=share([r.all_reduce_s for r in records]),
        wait=share([r.wait_s for r in records]),
    )


def _recoveries(outcome: DistOutcome) -> list[RecoverySummary]:
    first: dict[tuple[int, int], StepRecord] = {}
    for r in sorted(outcome.records, key=lambda r: r.attempt or 0):
        first.setdefault((r.step, r.rank), r)
    found = []
    for rec in outcome.recoveries:
        # Records the attempt after this failure ran for steps an earlier attempt finished.
        again = [
            r
            for r in outcome.records
            if r.attempt == rec.attempt + 1 and first[(r.step, r.rank)].attempt != r.attempt
        ]
        equal = sum(1 for r in again if r.loss == first[(r.step, r.rank)].loss)
        found.append(
            RecoverySummary(
                cause=rec.cause,
                rank=rec.rank,
                step=rec.step,
                restored_step=rec.restored_step,
                steps_replayed=rec.steps_replayed,
                detect_s=rec.detect_s,
                resume_s=rec.resume_s,
                replayed_records=len(again),
                replayed_losses_equal=equal,
                message=rec.message,
            )
        )
    return found


def summarize_scenario(outcome: DistOutcome, peak_flops_per_s: float) -> DistScenarioSummary:
    records = outcome.records
    world = outcome.world_size
    steps = job_steps(outcome)
    step_s = _p50([j.step_time_s for j in steps])
    step_tokens = [j.tokens for j in steps]
    step_flops = [j.model_flops for j in steps]
    wall_s = (
        (max(r.end_ns for r in records) - min(r.start_ns for r in records)) / 1e9
        if records
        else 0.0
    )
    ranks = sorted({r.rank for r in records})
    compute_p50 = [_p50([r.compute_s or 0.0 for r in records if r.rank == k]) or 0.0 for k in ranks]
    peaks = [max((r.peak_memory_bytes or 0) for r in records if r.rank == k) for k in ranks]
    m = outcome.microbatches // (outcome.ep * outcome.dp)
    p = outcome.pp
    bubbles = [(r.pipeline_s or 0.0) / r.microbatch_s for r in records if r.microbatch_s]
    executions = {(r.attempt, r.step) for r in records}
    ooms = sum(1 for rec in outcome.recoveries if rec.cause == "oom")
    a2a_s = sum(r.all_to_all_s or 0.0 for r in records)
    losses = [j.records[0].loss for j in steps]
    return DistScenarioSummary(
        layout=outcome.layout,
        ep=outcome.ep,
        pp=outcome.pp,
        dp=outcome.dp,
        world_size=world,
        policy=outcome.policy,
        skew=outcome.skew,
        budget_bytes=outcome.budget_bytes,
        steps=len(steps),
        attempts=outcome.attempts,
        stopped=outcome.stopped,
        job_step_s_p50=step_s,
        tokens_per_s=float(np.median(step_tokens)) / step_s if step_s else None,
        effective_tokens_per_s=sum(step_tokens) / wall_s if wall_s else None,
        mfu=float(np.median(step_flops)) / (step_s * peak_flops_per_s * world) if step_s else None,
        shares=_shares(records),
        bubble=float(np.mean(bubbles)) if p > 1 and bubbles else None,
        bubble_formula=(p - 1) / (m + p - 1),
        peak_memory_bytes_by_rank=peaks,
        compute_s_p50_by_rank=compute_p50,
        slowest_rank=ranks[int(np.argmax(compute_p50))] if ranks else None,
        straggler_spread=(max(compute_p50) - min(compute_p50)) / max(compute_p50)
        if compute_p50 and max(compute_p50) > 0
        else None,
        ooms=ooms,
        oom_rate=ooms / (len(executions) + ooms) if executions or ooms else None,
        loss_first=losses[0] if losses else None,
        loss_last=losses[-1] if losses else None,
        all_to_all_bytes_per_s=sum(r.all_to_all_bytes or 0 for r in records) / a2a_s
        if a2a_s
        else None,
        recoveries=_recoveries(outcome),
    )


def link_calibration(
    outcomes: list[DistOutcome], pipeline_one_way: tuple[int, float] | None
) -> LinkCalibration:
    """The run's links: all-to-all and all-reduce from every step, the pipeline link from
    the ping-pong (``(bytes, one-way seconds)``) the workers measured, if any."""
    records = [r for o in outcomes for r in o.records]
    a2a_bytes = sum(r.all_to_all_bytes or 0 for r in records)
    a2a_s = sum(r.all_to_all_s or 0.0 for r in records)
    ar_bytes = sum(r.all_reduce_bytes or 0 for r in records)
    ar_s = sum(r.all_reduce_s or 0.0 for r in records)
    return LinkCalibration(
        all_to_all_bytes_per_s=a2a_bytes / a2a_s if a2a_s and a2a_bytes else None,
        all_to_all_bytes=a2a_bytes,
        pipeline_bytes_per_s=pipeline_one_way[0] / pipeline_one_way[1]
        if pipeline_one_way
        else None,
        pipeline_message_bytes=pipeline_one_way[0] if pipeline_one_way else None,
        all_reduce_bytes_per_s=ar_bytes / ar_s if ar_s and ar_bytes else None,
        all_reduce_bytes=ar_bytes,
    )


def summarize_dist(
    outcomes: list[DistOutcome],
    peak: PeakFlopsSummary,
    pipeline_one_way: tuple[int, float] | None,
) -> DistTrainingSummary:
    return DistTrainingSummary(
        scenarios={o.name: summarize_scenario(o, peak.flops_per_s) for o in outcomes},
        peak_flops=peak,
        link=link_calibration(outcomes, pipeline_one_way),
    )
