"""A deployment sweep's report blocks: the recommendation and the arms first, then the
Pareto chart, then every arm's levels."""

from __future__ import annotations

import pandas as pd

from moeperf.collectors.deploy_sweep_records import DeploySweepSummary
from moeperf.reports.figures.deploy_sweep import deploy_sweep_chart
from moeperf.reports.render import Chart, Table
from moeperf.reports.terminal.deploy_sweep_tables import capacity_text


def deploy_sweep_blocks(sweep: DeploySweepSummary) -> list[Chart | Table]:
    recommendation = sweep.recommendation
    chosen = recommendation.why if recommendation is not None else "no arm ran"
    if recommendation is not None and recommendation.arm is None:
        chosen = f"none: {chosen}"
    comparisons = {c.arm: c for c in sweep.comparisons}
    rows = []
    for arm in sweep.arms:
        at = next((lv for lv in arm.levels if lv.streams == arm.capacity_held), None)
        versus = comparisons.get(arm.index)
        is_best = recommendation is not None and recommendation.arm == arm.index
        rows.append(
            {
                "arm": arm.label,
                "accelerators": arm.accelerators,
                "start-up s": ", ".join(f"{s:.1f}" for s in arm.startup_s) or (
                    "planned, not run" if arm.not_run else None
                ),
                f"capacity ({sweep.slo})": capacity_text(arm),
                "output tok/s per accelerator": at.output_tok_s_per_accelerator if at else None,
                "tok/s per user": at.tok_s_per_user if at else None,
                "vs recommended": "recommended" if is_best else
                (versus.outcome if versus is not None else None),
                "ratio [95%]": None if versus is None or versus.ratio is None else
                f"{versus.ratio:.3f} [{versus.ci_low:.3f}, {versus.ci_high:.3f}]",
                "memory plan": "; ".join(arm.plan) or None,
                "failures": "; ".join((*arm.not_run, *arm.failures)) or None,
                "stopped": "; ".join(arm.stops) or None,
            }
        )  # fmt: skip
    elapsed = f" The sweep took {sweep.elapsed_s:.0f} s." if sweep.elapsed_s is not None else ""
    caption = (
        f"Recommended: {chosen}.{elapsed} Capacity: the streams at which every repeat held "
        "the SLO; tok/s figures at the capacity's lower end; vs recommended: mean "
        "per-request output rate per accelerator against the recommended arm's at its "
        "level, 95% bootstrap interval (worse: below 1; not different: spans 1). "
        f"{sweep.repeats} repeat(s) per arm, interleaved."
    )
    levels = pd.DataFrame(
        [
            {
                "arm": arm.label,
                "streams": level.streams,
                "output tok/s": level.output_tok_s,
                "output tok/s per accelerator": level.output_tok_s_per_accelerator,
                "tok/s per user": level.tok_s_per_user,
                "TPOT p50 ms": None if level.tpot_p50_s is None else level.tpot_p50_s * 1e3,
                "TTFT p99 ms": None if level.ttft_p99_s is None else level.ttft_p99_s * 1e3,
                "SLO": {True: "held", False: "failed", None: "not judged"}[level.slo_held],
                "why": level.slo_reason,
            }
            for arm in sweep.arms
            for level in arm.levels
        ]
    )
    arms = pd.DataFrame(rows)
    if not any(arm.plan for arm in sweep.arms):  # no [plan]: no planner's word to show
        arms = arms.drop(columns="memory plan")
    return [
        Table(arms, caption, answers=True),
        Chart(
            deploy_sweep_chart(sweep),
            "One line per arm, one point per level: output tokens/s per user (x) against per "
            "accelerator (y). Ringed: on the Pareto front; star: the recommended arm and level.",
            drawn_by=("deploy_sweep",),
        ),
        Table(levels, "Every arm's levels over their repeats, with the SLO's reasons."),
    ]
