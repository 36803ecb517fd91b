"""A deployment sweep (``[deploy_sweep]``), as a serving run's summary holds it.

Each arm is one server configuration (a point of the spec's grid), started, probed, loaded
with ``load.levels`` and stopped, once per repeat; repeats are interleaved (A B C, C B A).
Every level of every repeat is a scenario of the summary with all its numbers; the records
here gather them per arm and level, and hold the answers across arms: the Pareto front, the
comparison of each arm with the recommended one, and the recommendation with its reason.
The definitions are in ``collectors.deploy_sweep_summary``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# A grid value: what a server knob takes.
Knob = bool | int | float | str


@dataclass(frozen=True, slots=True)
class DeployLevel:
    """One load level of one arm, over its repeats."""

    streams: int
    scenarios: tuple[str, ...]  # the level's scenario in each repeat that ran it, in run order
    # Output tokens / measured window (the summary's output_throughput_tok_s), the mean over
    # the repeats; per accelerator: divided by the arm's accelerators.
    output_tok_s: float | None
    output_tok_s_per_accelerator: float | None
    # TPOT p50 over the repeats' measured ok requests together, and its inverse: the output
    # tokens per second one user sees while decoding.
    tpot_p50_s: float | None
    tok_s_per_user: float | None
    ttft_p99_s: float | None  # over the repeats' measured ok requests together
    # Whether every repeat of the level held the SLO (None: not judged: a client-bound
    # repeat, or no SLO), and each repeat's reasons.
    slo_held: bool | None
    slo_reason: str


@dataclass(frozen=True, slots=True)
class DeployArm:
    """One server configuration and what each of its starts measured."""

    index: int  # 0-based, in the grid's order
    label: str  # "threads=1 max_running_requests=8"
    knobs: dict[str, Knob]
    accelerators: int  # what the per-accelerator figures divide by
    # Seconds from launch until the target answered, per start that answered.
    startup_s: tuple[float, ...] = ()
    # Why a start or a repeat failed ("did not start: ..."), per failure; empty: none did.
    failures: tuple[str, ...] = ()
    # After each stop: "stopped" or what was left (a process, a port still taken).
    stops: tuple[str, ...] = ()
    # The memory planner's word on the arm ([plan] beside the sweep; empty: not checked):
    # "fits: ..." or what does not fit; per level ("c=8: ...") with linked knobs.
    plan: tuple[str, ...] = ()
    # The starts the planner kept from running ("#1: planned, not run: kv cache: ...").
    not_run: tuple[str, ...] = ()
    levels: tuple[DeployLevel, ...] = ()
    # The capacity under the SLO, an interval of streams: the highest level of the unbroken
    # run of held levels from the lowest (None: the lowest did not hold), and the first
    # level that did not hold (None: every level held, the capacity is at least the top).
    capacity_held: int | None = None
    capacity_failed: int | None = None


@dataclass(frozen=True, slots=True)
class ParetoPoint:
    arm: int
    streams: int
    tok_s_per_user: float
    output_tok_s_per_accelerator: float
    on_front: bool


Outcome = Literal["worse", "not different", "better", "not compared"]


@dataclass(frozen=True, slots=True)
class DeployComparison:
    """An arm against the recommended one at the recommended level: the ratio of their
    mean per-request output rates per accelerator, with its 95% bootstrap interval."""

    arm: int
    streams: int
    ratio: float | None
    ci_low: float | None
    ci_high: float | None
    outcome: Outcome
    why: str


@dataclass(frozen=True, slots=True)
class DeployRecommendation:
    arm: int | None  # None: no arm held the SLO at any level
    streams: int | None
    why: str


@dataclass(frozen=True, slots=True)
class DeploySweepSummary:
    target_kind: str  # "reference": the embedded target restarted per arm
    slo: str  # the criteria, in words ("TTFT p99 <= 1 s and TPOT p99 <= 0.1 s")
    repeats: int
    order: tuple[int, ...]  # arm indices in the order they ran (A B C, C B A ...)
    arms: tuple[DeployArm, ...]
    pareto: tuple[ParetoPoint, ...] = ()
    comparisons: tuple[DeployComparison, ...] = ()
    recommendation: DeployRecommendation | None = None
    elapsed_s: float | None = None  # the sweep's wall time, starts and stops included
