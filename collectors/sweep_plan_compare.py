"""The memory planner's prediction beside what a sweep measured, one row per prompt length.

Measured: at the highest scrape of the target's gauges in the length's one-stream level,
the blocks in use (``TargetCounters.kv_blocks_used_max``) and, where the target states
them, the KV and linear-state bytes in use; that level's single sequence at its last
token holds the predicted T = prompt + output tokens, so the two should agree to a block
(a scrape falls at most one token step short). And the fit search's answer ([sweep.fit]:
c fit when all c ran at once with none preempted). The
planner counts whole sequences at T tokens, so the measured fit may exceed its
prediction while the prompts alone still fit (preemption needs the cache full).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from moeperf.collectors.serving_records import ScenarioSummary
from moeperf.collectors.sweep_records import SweepSummary


@dataclass(frozen=True, slots=True)
class PlanComparison:
    input_tokens: int
    tokens_per_sequence: int
    kv_bytes_per_sequence: int
    state_bytes_per_sequence: int
    predicted_blocks: int | None
    measured_blocks: float | None  # one-stream level's highest scrape; None: not stated
    measured_kv_bytes: float | None  # the same scrape's KV bytes (the reference target's)
    measured_state_bytes: float | None  # its linear-state bytes (0: full attention only)
    predicted_fit: int | None
    measured_fit: int | None  # the fit search's passed level; None: not searched or none


def plan_comparison(
    sweep: SweepSummary, scenarios: Mapping[str, ScenarioSummary]
) -> list[PlanComparison]:
    """One row per length the planner predicted; empty without [plan]."""
    if sweep.plan is None:
        return []
    rows = []
    for point in sweep.points:
        predicted = sweep.plan.point(point.input_tokens)
        if predicted is None:
            continue
        measured = None
        for name in point.scenarios:
            entry = scenarios.get(name)
            counters = entry.target_counters if entry is not None else None
            if entry is not None and entry.level == 1 and counters is not None:
                measured = counters
        fit = point.fit
        passed = int(fit.passed_level) if fit is not None and fit.passed_level else None
        rows.append(
            PlanComparison(
                point.input_tokens,
                predicted.tokens_per_sequence,
                predicted.kv_bytes_per_sequence,
                sweep.plan.state_bytes_per_sequence,
                predicted.blocks_per_sequence,
                None if measured is None else measured.kv_blocks_used_max,
                None if measured is None else measured.kv_bytes_used_max,
                None if measured is None else measured.linear_state_bytes_used_max,
                predicted.fit_sequences,
                passed,
            )
        )
    return rows
