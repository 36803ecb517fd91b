"""An MTP A/B run for the terminal: each arm's figures, its effects against MTP off, the
crossover and the output-equality verdict (definitions: collectors/mtp_ab_records.py)."""

from __future__ import annotations

from rich.table import Table

from moeperf.collectors.mtp_ab_records import (
    EFFECT_HEADS,
    EFFECT_METRICS,
    MtpAbEquality,
    MtpAbSummary,
    arm_name,
    verdict_rows,
)
from moeperf.collectors.units import ms_text
from moeperf.reports.terminal.presentation import Item, Presentation


def _num(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def arms_table(ab: MtpAbSummary) -> Table:
    table = Table(
        title=f"MTP A/B: {ab.blocks_per_arm} block(s) of {ab.block_s:g} s per arm, level and mode",
        caption="p50s in ms over every block's measured ok requests; acceptance from the "
        "target's counters over the blocks' windows; tokens/step: 1 + accepted / drafts; "
        "tokens/chunk: output tokens per content chunk, the client's view",
    )
    columns = (
        "mode", "streams", "arm", "requests", "TTFT p50", "TPOT p50", "ITL p50",
        "output tok/s", "tokens/chunk", "acceptance", "by position", "tokens/step",
    )  # fmt: skip
    for column in columns:
        table.add_column(column, justify="left" if column in ("mode", "arm") else "right")
    for row in ab.arm_levels:
        positions = (
            " ".join(_pct(p) for p in row.acceptance_by_position)
            if row.acceptance_by_position
            else "-"
        )
        table.add_row(
            row.mode,
            str(row.streams),
            arm_name(row.drafts),
            str(row.requests),
            ms_text(row.ttft_p50_s),
            ms_text(row.tpot_p50_s),
            ms_text(row.itl_p50_s),
            _num(row.output_tokens_per_s, 1),
            _num(row.tokens_per_chunk),
            _pct(row.acceptance_ratio),
            positions,
            _num(row.tokens_per_step),
        )
    return table


def effects_table(ab: MtpAbSummary) -> Table:
    table = Table(
        title="MTP A/B: each arm against MTP off (arm / off)",
        caption="95% percentile-bootstrap intervals (requests resampled); below 1 is faster "
        "for latencies; output tok/s is a rate of totals, reported and not tested",
    )
    for column in ("mode", "streams", "arm", "metric", "ratio", "95% CI", "verdict"):
        table.add_column(
            column, justify="left" if column in ("mode", "arm", "metric", "verdict") else "right"
        )
    for e in ab.effects:
        ci = "-" if e.ci_low is None or e.ci_high is None else f"{e.ci_low:.3f} - {e.ci_high:.3f}"
        table.add_row(
            e.mode, str(e.streams), arm_name(e.drafts), e.metric, _num(e.ratio, 3), ci, e.verdict
        )
    return table


def equality_line(equality: MtpAbEquality | None) -> str:
    if equality is None:
        return "greedy output equality: not checked"
    if equality.not_available:
        return f"greedy output equality: {equality.not_available}"
    arms = ", ".join(arm_name(d) for d in equality.arms)
    head = (
        f"greedy output equality ({equality.prompts} prompts, {equality.output_tokens} output "
        f"tokens, {equality.streams} at a time; {arms} against MTP off, "
        f"by {equality.position_unit}): "
    )
    if not equality.mismatches:
        return head + "identical"
    shown = "; ".join(
        f"prompt {m.prompt} {arm_name(m.drafts)} from {equality.position_unit} {m.position} "
        f"({m.off_token!r} vs {m.arm_token!r})"
        for m in equality.mismatches[:5]
    )
    more = len(equality.mismatches) - 5
    return (
        head
        + f"FAILED, {len(equality.mismatches)} differ: {shown}"
        + (f"; {more} more" if more > 0 else "")
    )


def verdicts_table(ab: MtpAbSummary) -> Table:
    """The A/B's answer: one row per mode, streams and arm; per metric, the arm's p50
    over MTP off's with its 95% interval and verdict."""
    table = Table(
        title="MTP A/B: each arm / MTP off, 95% interval, verdict",
        caption="below 1 is faster for latencies; better or worse: the interval excludes "
        "1; output tok/s: a rate of totals, not tested; --verbose: each arm's figures",
    )
    for column in ("mode", "streams", "arm", *(EFFECT_HEADS[m] for m in EFFECT_METRICS)):
        table.add_column(column, justify="right" if column == "streams" else "left")
    for mode, streams, drafts, cells in verdict_rows(ab):
        table.add_row(mode, str(streams), arm_name(drafts), *cells)
    return table


def mtp_ab_tables(ab: MtpAbSummary) -> Presentation:
    """The verdicts, crossover and output equality (the answer); each arm's figures and
    the effects one per row (detail)."""
    answer: list[Item] = [verdicts_table(ab)]
    answer += [f"crossover ({c.mode}): {c.text}" for c in ab.crossover]
    answer.append(equality_line(ab.equality))
    return Presentation(answer=answer, detail=[arms_table(ab), effects_table(ab)])
