"""The report blocks of a serving run's kind: a capacity search, a sweep (with its fit
and plan), prefill interference."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from moeperf.collectors.capacity_records import CapacitySummary
from moeperf.collectors.interference_records import InterferenceSummary
from moeperf.collectors.interference_rows import interference_rows
from moeperf.collectors.quantiles import QuantileEstimate
from moeperf.collectors.serving_records import ScenarioSummary
from moeperf.collectors.sweep_plan_compare import plan_comparison
from moeperf.collectors.sweep_records import SweepSummary, fit_answer
from moeperf.reports.figures.capacity import capacity_probes
from moeperf.reports.figures.interference import chunk_label, interference_chart
from moeperf.reports.figures.sweep import sweep_chart
from moeperf.reports.figures.sweep_frame import sweep_frame, sweep_table_frame
from moeperf.reports.render import (
    Chart,
    Table,
)


def capacity_blocks(
    capacity: CapacitySummary, scenarios: Mapping[str, ScenarioSummary]
) -> list[Chart | Table]:
    """The capacity search: its answer and probes as a table, and the probes' chart."""
    unit = capacity.unit
    verdicts = {True: "held", False: "failed", None: "not judged"}
    rows = [
        {
            "probe": number,
            unit: probe.level,
            "scenario": probe.scenario,
            "phase": probe.phase,
            "SLOs": verdicts[probe.passed],
            "why": probe.reason,
        }
        for number, probe in enumerate(capacity.probes, start=1)
    ]
    caption = (
        f"Capacity for {capacity.criteria}: {capacity.answer()} (search {capacity.status}). "
        "Bracketing "
        "from the start level by the growth factor, then bisection; each probe is one "
        "load level of this run, judged on its point estimates (p99: numpy linear "
        "quantile of the level's measured ok requests; goodput ratio: ok requests "
        "meeting [slo] / measured requests), each with its 95% interval."
    )
    answer = pd.DataFrame(
        [{f"capacity for {capacity.criteria}": capacity.answer(), "search": capacity.status,
          "probes": len(capacity.probes)}]
    )  # fmt: skip
    return [
        Table(
            answer,
            "The highest load at which every SLO held, bracketed by the probes "
            "below (the search's answer).",
            answers=True,
        ),
        Table(pd.DataFrame(rows), caption),
        Chart(
            capacity_probes(capacity, scenarios),
            "Each point is a probe (its number in the search); the dashed line is the "
            "limit; the shaded band is where the capacity lies.",
            drawn_by=("capacity",),
            answers=True,
        ),
    ]


def sweep_blocks(
    sweep: SweepSummary, scenarios: Mapping[str, ScenarioSummary]
) -> list[Chart | Table]:
    """The sweep over prompt lengths: a row per (length, level), and its four panels."""
    limit = (
        f"context limit {sweep.context_tokens} tokens ({sweep.context_source})"
        if sweep.context_tokens is not None
        else "context limit not stated by the target"
    )
    caption = (
        f"Sweep over prompt lengths ({limit}; up to {sweep.max_output_tokens} output tokens "
        "per request; lengths that do not fit it were not sent): prefill tok/s is prompt "
        "tokens / TTFT p50 per request, its 95% interval the TTFT p50's inverted, and total "
        "prompt tok/s is prompt tokens x ok measured requests / the measured window."
    )
    frame = sweep_frame(sweep, scenarios)
    extra = [t for t in (fit_table(sweep), plan_table(sweep, scenarios)) if t is not None]
    planner = (
        " Dotted with crosses: the memory planner's blocks for that many sequences (an "
        "estimate, [plan])."
        if sweep.plan is not None
        else ""
    )
    return [
        Table(sweep_table_frame(sweep, frame), caption, answers=True),
        *extra,
        Chart(
            sweep_chart(frame, sweep.not_available(), plan=sweep.plan),
            "x: prompt tokens (log scale); one colour per load level; hollow markers: the "
            "level failed or is invalid; grey dotted lines: lengths not available from this "
            "target (hover the label for why)." + planner,
            drawn_by=("sweep",),
        ),
    ]


def plan_table(sweep: SweepSummary, scenarios: Mapping[str, ScenarioSummary]) -> Table | None:
    """[plan]: the memory planner's prediction per length beside what was measured."""
    plan = sweep.plan
    rows = plan_comparison(sweep, scenarios)
    if plan is None or not rows:
        return None
    frame = pd.DataFrame(
        {
            "prompt tokens": r.input_tokens,
            "tokens per sequence (prompt + output)": r.tokens_per_sequence,
            "KV bytes per sequence (planned)": r.kv_bytes_per_sequence,
            "state bytes per sequence (planned)": r.state_bytes_per_sequence,
            "blocks per sequence (planned)": r.predicted_blocks,
            "blocks in use at 1 stream (measured)": r.measured_blocks,
            "KV bytes in use at 1 stream (measured)": r.measured_kv_bytes,
            "state bytes in use at 1 stream (measured)": r.measured_state_bytes,
            "sequences that fit (planned)": r.predicted_fit,
            "streams that fit (measured)": r.measured_fit,
        }
        for r in rows
    )
    return Table(
        frame,
        f"The memory planner (suites/plan, docs/guides/memory-planning.md; an estimate from "
        f"{plan.model}) beside the sweep's measurements. {plan.deployment}. KV bytes per "
        f"token {plan.kv_bytes_per_token:,}, linear-attention state per sequence "
        f"{plan.state_bytes_per_sequence:,} bytes (flat in the context). A sequence holds "
        "prompt + output tokens at its last token; planned blocks are those tokens over "
        f"the block size ({plan.block_tokens or 'not known'}), rounded up; sequences that "
        f"fit: the cache's blocks over that (cache: {plan.cache_source}). Measured: the "
        "blocks in use at the highest scrape of the one-stream level, and the fit search's "
        "answer (all c running at once, none preempted: at least the planned count, since "
        "preemption waits until the cache is full).",
    )


def interference_blocks(
    summary: InterferenceSummary, scenarios: Mapping[str, ScenarioSummary]
) -> list[Chart | Table]:
    """The interference run: a row per arm, and the chart of both sides of the trade."""
    rows = interference_rows(summary, scenarios)

    def ms(estimate: QuantileEstimate | None) -> float | None:
        return None if estimate is None else estimate.value * 1e3

    frame = pd.DataFrame(
        [
            {
                "chunked prefill": chunk_label(r.chunked_prefill_size),
                "decode ITL p50 quiet ms": ms(r.quiet_itl_p50_s),
                "decode ITL p50 mixed ms": ms(r.mixed_itl_p50_s),
                "decode ITL p99 quiet ms": ms(r.quiet_itl_p99_s),
                "decode ITL p99 mixed ms": ms(r.mixed_itl_p99_s),
                "long-prompt TTFT p50 ms": ms(r.prefill_ttft_p50_s),
                "long-prompt TTFT p99 ms": ms(r.prefill_ttft_p99_s),
            }
            for r in rows
        ]
    )
    caption = (
        f"Prefill interference: per arm (the reference target restarted with that "
        f"chunked-prefill size; whole = 0, every arm with a step budget of "
        f"{summary.max_num_batched_tokens} tokens) {summary.decode_streams} streams decode "
        f"{summary.decode_input_tokens}-token prompts into {summary.decode_output_tokens} "
        f"tokens alone (quiet) for {summary.duration_s:g} s, then for {summary.duration_s:g} s "
        f"while {summary.prefill_input_tokens}-token prompts arrive at "
        f"{summary.prefill_rate:g}/s (mixed). Every request measured; percentiles of the "
        "ok requests (ITL: every token gap)."
    )
    return [
        Table(frame, caption, answers=True),
        Chart(
            interference_chart(rows),
            "Mixed (solid) against quiet (dashed): the decoders' ITL with and without long "
            "prompts arriving; right, those prompts' TTFT. Error bars: 95% intervals.",
            drawn_by=("interference",),
        ),
    ]


def fit_table(sweep: SweepSummary) -> Table | None:
    """How many concurrent requests of each length fit ([sweep.fit]), probe by probe."""
    verdicts = {True: "fit", False: "did not", None: "not judged"}
    rows = [
        {
            "prompt tokens": point.input_tokens,
            "fit": fit_answer(point.fit),
            "probe": number,
            "streams": probe.level,
            "verdict": verdicts[probe.passed],
            "why": probe.reason,
        }
        for point in sweep.points
        if point.fit is not None
        for number, probe in enumerate(point.fit.probes, start=1)
    ]
    if not rows:
        return None
    return Table(
        pd.DataFrame(rows),
        "Concurrent requests that fit at each prompt length: c streams fit when the "
        "target's running-requests gauge showed all c running at once at some scrape of "
        "the probe and its preemptions counter did not rise; bracketing, then bisection "
        "to one stream (suites/serving/sweep_fit.py).",
    )
