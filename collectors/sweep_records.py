"""The prompt lengths of a sweep run (``[sweep]``), as a serving run's summary holds them.

Every (length, level) pair that was sent is a scenario of the summary with all its
numbers, and its ``input_tokens``; this record keeps the lengths in order, the context
limit they were checked against, those the target could not hold ("not available from
this target", never sent, so no scenario), and with ``[sweep.fit]`` how many concurrent
requests of each length fit.
"""

from __future__ import annotations

from dataclasses import dataclass

from moeperf.collectors.capacity_records import CapacitySummary
from moeperf.collectors.scenario import ScenarioMode


@dataclass(frozen=True, slots=True)
class SweepPointSummary:
    """One prompt length: its scenarios (one per load level), or why it was not sent."""

    input_tokens: int
    scenarios: tuple[str, ...] = ()
    not_available: str | None = None
    # [sweep.fit]: how many streams of this length fit at once (suites/serving/sweep_fit),
    # a search whose probes are scenarios of the summary too; None: not searched.
    fit: CapacitySummary | None = None


@dataclass(frozen=True, slots=True)
class SweepPlanPoint:
    """The memory planner's prediction for one prompt length (suites/serving/sweep_plan)."""

    input_tokens: int
    tokens_per_sequence: int  # prompt + the most output tokens a request asks for
    # Its blocks' KV bytes (blocks x block tokens x bytes per token; without a block size,
    # tokens_per_sequence x bytes per token).
    kv_bytes_per_sequence: int
    blocks_per_sequence: int | None  # ceil(tokens / block tokens); None: no block size
    fit_sequences: int | None  # such sequences the cache holds at once; None: size unknown


@dataclass(frozen=True, slots=True)
class SweepPlan:
    """``[plan]``: what the memory planner (suites/plan) predicts for the sweep's lengths,
    drawn beside the measured KV usage. An estimate from the model's config and the
    deployment, not a measurement."""

    model: str  # the config.json planned
    deployment: str  # the deployment in one line
    kv_bytes_per_token: int
    state_bytes_per_sequence: int  # linear-attention state; 0 for full attention only
    block_tokens: int | None
    cache_bytes: int | None  # the KV cache the fits are counted in
    cache_blocks: int | None
    cache_source: str  # where the cache size comes from
    points: tuple[SweepPlanPoint, ...]

    def point(self, input_tokens: int) -> SweepPlanPoint | None:
        return next((p for p in self.points if p.input_tokens == input_tokens), None)


@dataclass(frozen=True, slots=True)
class SweepSummary:
    """The sweep's lengths, ascending, with the limit and output length they were fit to."""

    context_tokens: int | None  # the target's context limit (None: unknown)
    context_source: str  # where the limit was read
    max_output_tokens: int
    points: tuple[SweepPointSummary, ...]
    plan: SweepPlan | None = None  # [plan]: the planner's prediction per length
    # How each length's levels were offered (load.mode), which names a level across the
    # lengths ("c=4"); None: a run stored before summaries kept it.
    load_mode: ScenarioMode | None = None

    def not_available(self) -> tuple[SweepPointSummary, ...]:
        return tuple(p for p in self.points if p.not_available is not None)


def fit_answer(fit: CapacitySummary) -> str:
    """The fit in words: "2 fit, 3 did not", "at least 256 fit (the most probed)",
    "fewer than 1 fit", or why none was found."""
    held, failed = fit.passed_level, fit.failed_level
    if held is not None and failed is not None:
        return f"{held:g} fit, {failed:g} did not"
    if held is not None:
        return f"at least {held:g} fit (the most probed)"
    if failed is not None:
        return f"fewer than {failed:g} fit"
    return "not found: " + (fit.probes[-1].reason if fit.probes else "no probe ran")
