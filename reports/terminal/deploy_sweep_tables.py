"""A deployment sweep for the terminal: the arms' table, then the recommendation, last.

Detail (--verbose): every arm's levels, with their SLO reasons."""

from __future__ import annotations

from rich.table import Table

from moeperf.collectors.deploy_sweep_records import (
    DeployArm,
    DeployComparison,
    DeploySweepSummary,
)
from moeperf.reports.terminal.presentation import Presentation


def _number(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def capacity_text(arm: DeployArm) -> str:
    """ "4 <= c < 8", "c >= 8", "c < 1", or "not judged"."""
    if not arm.levels:
        return "did not run"
    held, failed = arm.capacity_held, arm.capacity_failed
    lowest = min(level.streams for level in arm.levels)
    if held is None and failed is None:
        return "not judged"
    if held is None:
        return f"c < {lowest}"
    if failed is None:
        return f"c >= {held}"
    return f"{held} <= c < {failed}"


def _comparison_text(comparison: DeployComparison | None, recommended: bool) -> str:
    if recommended:
        return "recommended"
    if comparison is None:
        return "-"
    if comparison.ratio is None or comparison.ci_low is None or comparison.ci_high is None:
        return comparison.outcome
    return (
        f"{comparison.ratio:.2f}x [{comparison.ci_low:.2f}, {comparison.ci_high:.2f}] "
        f"{comparison.outcome}"
    )


def arms_table(sweep: DeploySweepSummary) -> Table:
    recommended = sweep.recommendation.arm if sweep.recommendation else None
    streams = sweep.recommendation.streams if sweep.recommendation else None
    table = Table(
        title=f"deployment sweep: {len(sweep.arms)} arms x {sweep.repeats} repeat(s), SLO "
        f"{sweep.slo}",
        caption=(
            "capacity: streams at which every repeat held the SLO; tok/s per accelerator: "
            "output tokens / measured window at the capacity's lower end; vs recommended: "
            f"mean per-request output rate per accelerator at {streams} streams, 95% "
            "bootstrap interval; front: levels on the Pareto front (tok/s per user against "
            "per accelerator)"
        ),
    )
    columns = ("arm", "accel", "start-up s", "capacity", "tok/s per accel", "tok/s per user",
               "vs recommended", "front", "stopped")  # fmt: skip
    for column in columns:
        table.add_column(column, justify="left" if column in ("arm", "vs recommended") else "right")
    comparisons = {c.arm: c for c in sweep.comparisons}
    on_front: dict[int, list[int]] = {}
    for point in sweep.pareto:
        if point.on_front:
            on_front.setdefault(point.arm, []).append(point.streams)
    for arm in sweep.arms:
        at = next((lv for lv in arm.levels if lv.streams == arm.capacity_held), None)
        starts = ", ".join(f"{s:.1f}" for s in arm.startup_s) or (
            "planned, not run" if arm.not_run else "-"
        )
        clean = all(stop.endswith(": stopped") for stop in arm.stops)
        table.add_row(
            arm.label,
            str(arm.accelerators),
            starts,
            capacity_text(arm),
            _number(at.output_tok_s_per_accelerator if at else None),
            _number(at.tok_s_per_user if at else None),
            _comparison_text(comparisons.get(arm.index), arm.index == recommended),
            ", ".join(f"c={c}" for c in on_front.get(arm.index, [])) or "-",
            ("yes" if clean else "NO") if arm.stops else "-",
        )
    return table


def levels_table(arm: DeployArm) -> Table:
    table = Table(title=f"{arm.label}: each level over its repeats")
    for column in ("streams", "output tok/s", "TPOT p50 ms", "TTFT p99 ms", "SLO", "why"):
        table.add_column(column, justify="left" if column == "why" else "right")
    for level in arm.levels:
        held = {True: "held", False: "failed", None: "not judged"}[level.slo_held]
        table.add_row(
            str(level.streams),
            _number(level.output_tok_s),
            _number(None if level.tpot_p50_s is None else level.tpot_p50_s * 1e3),
            _number(None if level.ttft_p99_s is None else level.ttft_p99_s * 1e3),
            held,
            level.slo_reason,
        )
    return table


def deploy_sweep_lines(sweep: DeploySweepSummary) -> Presentation:
    """The arms' table and failures, then the recommendation (the answer's last line)."""
    answer: list[Table | str] = [arms_table(sweep)]
    for arm in sweep.arms:
        for failure in (*arm.not_run, *arm.failures):
            answer.append(f"{arm.label}: {failure}")
        for stop in arm.stops:
            if not stop.endswith(": stopped"):
                answer.append(f"{arm.label}: after its stop {stop}")
    elapsed = f" (the sweep took {sweep.elapsed_s:.0f} s)" if sweep.elapsed_s is not None else ""
    recommendation = sweep.recommendation
    if recommendation is None or recommendation.arm is None:
        why = recommendation.why if recommendation is not None else "no arm ran"
        answer.append(f"recommended: none: {why}{elapsed}")
    else:
        answer.append(f"recommended: {recommendation.why}{elapsed}")
    return Presentation(
        answer=answer, detail=[levels_table(arm) for arm in sweep.arms if arm.levels]
    )
