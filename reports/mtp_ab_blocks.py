"""An MTP A/B run in the report: each arm's figures per level and mode, the effects
against MTP off as a forest plot, the crossover and the greedy output-equality verdict.
The same content as the terminal's tables; definitions in ``collectors.mtp_ab_records``
(quoted in the page's appendix under "MTP A/B")."""

from __future__ import annotations

import pandas as pd

from moeperf.collectors.mtp_ab_records import (
    EFFECT_HEADS,
    EFFECT_METRICS,
    MtpAbSummary,
    arm_name,
    verdict_rows,
)
from moeperf.collectors.units import to_ms
from moeperf.reports.figures.forest import forest_plot
from moeperf.reports.render import Chart, Table


def _arms(ab: MtpAbSummary) -> Table:
    frame = pd.DataFrame(
        [
            {
                "mode": r.mode,
                "streams": r.streams,
                "arm": arm_name(r.drafts),
                "requests": r.requests,
                "TTFT p50 ms": to_ms(r.ttft_p50_s),
                "TPOT p50 ms": to_ms(r.tpot_p50_s),
                "ITL p50 ms": to_ms(r.itl_p50_s),
                "output tok/s": r.output_tokens_per_s,
                "tokens/chunk": r.tokens_per_chunk,
                "acceptance": r.acceptance_ratio,
                "acceptance by position": (
                    ", ".join(f"{p:.1%}" for p in r.acceptance_by_position)
                    if r.acceptance_by_position
                    else "-"
                ),
                "tokens/step": r.tokens_per_step,
            }
            for r in ab.arm_levels
        ]
    )
    return Table(
        frame,
        f"MTP A/B: every arm ran {ab.blocks_per_arm} block(s) of {ab.block_s:g} s at each "
        "level and mode, interleaved (A B ..., then reversed), from the same prompts. "
        "p50s over the measured ok requests of all its blocks; acceptance from the "
        "target's counters, their increase over each block's window; tokens/step = 1 + "
        "accepted / drafts; tokens/chunk: output tokens per content chunk as the client saw "
        f"them. Sampled mode: temperature {ab.sampled_temperature:g}.",
    )


def _effects(ab: MtpAbSummary) -> list[Chart | Table]:
    rows = [
        {
            "mode": e.mode,
            "streams": e.streams,
            "arm": arm_name(e.drafts),
            "metric": e.metric,
            "arm / MTP off": e.ratio,
            "ci_low": e.ci_low,
            "ci_high": e.ci_high,
            "verdict": e.verdict,
        }
        for e in ab.effects
    ]
    if not rows:
        return []
    table = pd.DataFrame(rows)
    tested = table[table["ci_low"].notna()]
    forest = pd.DataFrame(
        {
            "metric": tested["metric"]
            + " "
            + tested["mode"]
            + " c="
            + tested["streams"].astype(str),
            "effect": tested["arm / MTP off"],
            "ci_low": tested["ci_low"],
            "ci_high": tested["ci_high"],
            "baseline": "MTP off",
            "candidate": tested["arm"],
        }
    )
    crossover = " ".join(f"{c.mode}: {c.text}." for c in ab.crossover)
    return [
        Table(
            table,
            "Each arm against MTP off: the ratio of its p50 to MTP off's, with a 95% "
            "percentile-bootstrap interval (requests resampled, each side on its own); "
            "below 1 is faster. Verdict: better or worse when the interval excludes 1. "
            "Output tok/s is a rate of totals: reported, not tested. " + crossover,
        ),
        Chart(
            forest_plot(forest, effect_label="arm / MTP off", title="MTP A/B effects"),
            "Each row: an arm's p50 over MTP off's at one level and mode, with its 95% "
            "interval; solid squares exclude 1 (no effect).",
            drawn_by=("forest",),
        ),
    ]


def _equality(ab: MtpAbSummary) -> Table | None:
    eq = ab.equality
    if eq is None:
        return None
    if eq.not_available:
        return Table(pd.DataFrame({"greedy output equality": [eq.not_available]}), answers=True)
    rows = [
        {
            "prompt": m.prompt,
            "arm": arm_name(m.drafts),
            f"first differing {eq.position_unit}": m.position,
            "MTP off": m.off_token,
            "arm's": m.arm_token,
        }
        for m in eq.mismatches
    ]
    verdict = "identical" if not rows else f"FAILED: {len(rows)} prompt/arm pair(s) differ"
    frame = pd.DataFrame(rows) if rows else pd.DataFrame({"greedy output equality": [verdict]})
    return Table(
        frame,
        answers=True,
        caption=f"Greedy output equality: {eq.prompts} prompts, {eq.output_tokens} output tokens, "
        f"{eq.streams} at a time, to every arm ({', '.join(arm_name(d) for d in eq.arms)}), "
        f"compared with MTP off by {eq.position_unit}: {verdict}. Verification must leave "
        "a speculating engine's greedy output exactly the main model's.",
    )


def _verdicts(ab: MtpAbSummary) -> Table:
    heads = [EFFECT_HEADS[m] for m in EFFECT_METRICS]
    frame = pd.DataFrame(
        [
            {
                "mode": mode,
                "streams": streams,
                "arm": arm_name(drafts),
                **dict(zip(heads, cells, strict=True)),
            }
            for mode, streams, drafts, cells in verdict_rows(ab)
        ]
    )
    crossover = " ".join(f"Crossover, {c.mode}: {c.text}." for c in ab.crossover)
    return Table(
        frame,
        "MTP A/B verdicts: each arm's p50 over MTP off's, [its 95% interval], and the "
        "verdict (better or worse: the interval excludes 1; below 1 is faster). Output "
        "tok/s: a rate of totals, reported, not tested. " + crossover,
        answers=True,
    )


def mtp_ab_blocks(ab: MtpAbSummary) -> list[Chart | Table]:
    """The verdicts and the greedy output equality (the answer); each arm's figures, the
    effects one per row and their forest plot."""
    blocks: list[Chart | Table] = [_verdicts(ab), _arms(ab), *_effects(ab)]
    equality = _equality(ab)
    if equality is not None:
        blocks.insert(1, equality)
    return blocks
