"""A sweep over prompt lengths for the terminal: one row per (length, level), and a row
for each length the target could not hold."""

from __future__ import annotations

from collections.abc import Mapping

from rich.table import Table

from moeperf.collectors.prefill import prefill_rates
from moeperf.collectors.quantiles import QuantileEstimate
from moeperf.collectors.serving_records import ScenarioSummary
from moeperf.collectors.sweep_plan_compare import plan_comparison
from moeperf.collectors.sweep_records import SweepSummary, fit_answer
from moeperf.collectors.target_counters import NOT_AVAILABLE

_DASH = "-"


def _ms(estimate: QuantileEstimate | None) -> str:
    return _DASH if estimate is None else f"{estimate.value * 1e3:,.1f}"


def _interval_ms(estimate: QuantileEstimate | None) -> str:
    if estimate is None or estimate.ci_low is None or estimate.ci_high is None:
        return "too few samples"
    return f"{estimate.ci_low * 1e3:,.1f} - {estimate.ci_high * 1e3:,.1f}"


def _rate(value: float | None) -> str:
    return _DASH if value is None else f"{value:,.0f}"


def _kv(entry: ScenarioSummary) -> str:
    counters = entry.target_counters
    if counters is None or counters.kv_usage_max_ratio is None:
        return NOT_AVAILABLE if counters is not None else _DASH
    ratio = f"{counters.kv_usage_max_ratio:.1%}"
    if counters.kv_blocks_used_max is None:
        return ratio
    return f"{counters.kv_blocks_used_max:,.0f} blocks ({ratio})"


def sweep_table(sweep: SweepSummary, scenarios: Mapping[str, ScenarioSummary]) -> Table:
    limit = (
        f"context limit {sweep.context_tokens} tokens ({sweep.context_source})"
        if sweep.context_tokens is not None
        else "context limit not stated by the target"
    )
    table = Table(
        title=f"sweep over prompt lengths ({limit}; up to {sweep.max_output_tokens} output tokens)",
        caption="prefill tok/s: prompt tokens / TTFT p50 (per request, 95% interval) and "
        "prompt tokens x ok requests / window (total); KV max: the target's KV-cache usage "
        "(blocks where it states its total) at the highest scrape of the level",
    )
    columns = (
        "prompt tokens", "scenario", "status", "TTFT p50 ms", "TTFT p50 95% CI ms",
        "TTFT p99 ms", "prefill tok/s", "prefill tok/s CI", "total prompt tok/s",
        "TPOT p50 ms", "KV max",
    )  # fmt: skip
    for column in columns:
        table.add_column(column, justify="left" if column in ("scenario", "status") else "right")
    for point in sweep.points:
        if point.not_available is not None:
            table.add_row(str(point.input_tokens), _DASH, point.not_available)
            continue
        for name in point.scenarios:
            entry = scenarios.get(name)
            if entry is None:
                continue
            ttft = entry.latency_s.ttft_s
            rates = prefill_rates(entry)
            per_request = _DASH if rates is None else _rate(rates.per_request_p50_tok_s)
            interval = _DASH
            if rates is not None and rates.per_request_ci_low_tok_s is not None:
                interval = (
                    f"{_rate(rates.per_request_ci_low_tok_s)} - "
                    f"{_rate(rates.per_request_ci_high_tok_s)}"
                )
            table.add_row(
                str(point.input_tokens),
                name,
                entry.status,
                _ms(ttft.at(0.5)),
                _interval_ms(ttft.at(0.5)),
                _ms(ttft.at(0.99)),
                per_request,
                interval,
                _DASH if rates is None else _rate(rates.total_tok_s),
                _ms(entry.latency_s.tpot_s.at(0.5)),
                _kv(entry),
            )
    return table


def fit_table(sweep: SweepSummary) -> Table | None:
    """How many concurrent requests of each length fit ([sweep.fit]); None: not searched."""
    searched = [p for p in sweep.points if p.fit is not None]
    if not searched:
        return None
    criteria = searched[0].fit.criteria if searched[0].fit is not None else ""
    table = Table(
        title=f"concurrent requests that fit, per prompt length ({criteria})",
        caption="each probe held its streams for sweep.fit.probe_s, judged from the "
        "target's scraped running-requests gauge and preemptions counter",
    )
    for column in ("prompt tokens", "fit", "search", "probes (streams: verdict)"):
        table.add_column(column)
    for point in searched:
        fit = point.fit
        assert fit is not None
        probes = "; ".join(
            f"{p.level:g}: {_FIT_VERDICT[p.passed]} ({p.reason})" for p in fit.probes
        )
        table.add_row(str(point.input_tokens), fit_answer(fit), fit.status, probes)
    return table


_FIT_VERDICT = {True: "fit", False: "did not", None: "not judged"}


def plan_table(sweep: SweepSummary, scenarios: Mapping[str, ScenarioSummary]) -> Table | None:
    """[plan]: the planner's KV prediction beside the measured blocks and fit; None without."""
    rows = plan_comparison(sweep, scenarios)
    if sweep.plan is None or not rows:
        return None
    plan = sweep.plan
    table = Table(
        title=f"memory planner vs measured ({plan.kv_bytes_per_token:,} KV bytes per token, "
        f"{plan.state_bytes_per_sequence:,} state bytes per sequence; an estimate)",
        caption=f"{plan.model}; {plan.deployment}; cache: {plan.cache_source}",
    )
    for column in ("prompt tokens", "tokens/seq", "KV bytes/seq", "blocks/seq planned",
                   "blocks in use at 1 stream", "KV bytes at 1 stream", "state bytes planned",
                   "state bytes at 1 stream", "fit planned", "fit measured"):  # fmt: skip
        table.add_column(column, justify="right")
    for r in rows:
        table.add_row(
            str(r.input_tokens),
            str(r.tokens_per_sequence),
            f"{r.kv_bytes_per_sequence:,}",
            _DASH if r.predicted_blocks is None else str(r.predicted_blocks),
            _DASH if r.measured_blocks is None else f"{r.measured_blocks:g}",
            _DASH if r.measured_kv_bytes is None else f"{r.measured_kv_bytes:,.0f}",
            f"{r.state_bytes_per_sequence:,}",
            _DASH if r.measured_state_bytes is None else f"{r.measured_state_bytes:,.0f}",
            _DASH if r.predicted_fit is None else str(r.predicted_fit),
            _DASH if r.measured_fit is None else str(r.measured_fit),
        )
    return table
