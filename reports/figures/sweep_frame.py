"""A sweep over prompt lengths as rows: one per sent scenario (its length, level and every
figure the chart and the table show, NaN where unknown), and the table of them."""

from __future__ import annotations

import math
from collections.abc import Mapping

import pandas as pd

from moeperf.collectors.prefill import prefill_rates
from moeperf.collectors.quantiles import QuantileEstimate
from moeperf.collectors.scenario import UNIQUE_SUFFIX, Scenario, ScenarioMode
from moeperf.collectors.serving_records import ScenarioSummary
from moeperf.collectors.sweep_records import SweepSummary

COLUMNS = [
    "input_tokens",
    "scenario",
    "level",
    "level_name",
    "status",
    "ttft_p50_s",
    "ttft_p50_low_s",
    "ttft_p50_high_s",
    "ttft_p99_s",
    "tpot_p50_s",
    "tpot_p50_low_s",
    "tpot_p50_high_s",
    "prefill_tok_s",
    "prefill_low_tok_s",
    "prefill_high_tok_s",
    "total_prompt_tok_s",
    "kv_usage_max_ratio",
    "kv_blocks_used_max",
    "kv_bytes_used_max",
    "state_bytes_used_max",
]


MIB = 2**20


def _number(value: float | None) -> float:
    return float("nan") if value is None else float(value)


def _estimate(estimate: QuantileEstimate | None) -> tuple[float, float, float]:
    """(value, interval low, interval high), NaN where unknown."""
    if estimate is None:
        return math.nan, math.nan, math.nan
    return estimate.value, _number(estimate.ci_low), _number(estimate.ci_high)


def level_name(entry: ScenarioSummary, mode: ScenarioMode | None, scenario: str) -> str:
    """What names the scenario's load level across the sweep's lengths ("c=4"), made from
    its record. A run stored before summaries kept the load mode says "level 4"; a
    scenario without a level (none is written so) keeps its own name."""
    if entry.level is None:
        return scenario
    if mode is not None:
        return Scenario(mode, entry.level, None, entry.unique, entry.repeat).name
    unique = UNIQUE_SUFFIX if entry.unique else ""
    repeat = f" #{entry.repeat}" if entry.repeat is not None else ""
    return f"level {entry.level:g}{unique}{repeat}"


def _row(
    input_tokens: int, scenario: str, entry: ScenarioSummary, mode: ScenarioMode | None
) -> dict[str, object]:
    latency = entry.latency_s
    ttft, ttft_low, ttft_high = _estimate(latency.ttft_s.at(0.5))
    tpot, tpot_low, tpot_high = _estimate(latency.tpot_s.at(0.5))
    rates = prefill_rates(entry)
    counters = entry.target_counters
    return {
        "input_tokens": input_tokens,
        "scenario": scenario,
        "level": _number(entry.level),
        "level_name": level_name(entry, mode, scenario),
        "status": entry.status,
        "ttft_p50_s": ttft,
        "ttft_p50_low_s": ttft_low,
        "ttft_p50_high_s": ttft_high,
        "ttft_p99_s": _number(latency.ttft_s.value_at(0.99)),
        "tpot_p50_s": tpot,
        "tpot_p50_low_s": tpot_low,
        "tpot_p50_high_s": tpot_high,
        "prefill_tok_s": _number(None if rates is None else rates.per_request_p50_tok_s),
        "prefill_low_tok_s": _number(None if rates is None else rates.per_request_ci_low_tok_s),
        "prefill_high_tok_s": _number(None if rates is None else rates.per_request_ci_high_tok_s),
        "total_prompt_tok_s": _number(None if rates is None else rates.total_tok_s),
        "kv_usage_max_ratio": _number(None if counters is None else counters.kv_usage_max_ratio),
        "kv_blocks_used_max": _number(None if counters is None else counters.kv_blocks_used_max),
        "kv_bytes_used_max": _number(None if counters is None else counters.kv_bytes_used_max),
        "state_bytes_used_max": _number(
            None if counters is None else counters.linear_state_bytes_used_max
        ),
    }


def sweep_frame(sweep: SweepSummary, scenarios: Mapping[str, ScenarioSummary]) -> pd.DataFrame:
    """One row per sent scenario of ``sweep``, by length then level (columns ``COLUMNS``;
    NaN where unknown). A scenario the summary lacks has no row."""
    rows = [
        _row(point.input_tokens, name, scenarios[name], sweep.load_mode)
        for point in sweep.points
        for name in point.scenarios
        if name in scenarios
    ]
    return pd.DataFrame(rows, columns=COLUMNS)


def kv_panel(frame: pd.DataFrame) -> tuple[str, float, str] | None:
    """(column, scale, axis title) of panel (d): bytes in use where the target states
    them, else blocks in use where it states blocks, else the usage ratio in percent; None
    when none is known."""
    if frame["kv_bytes_used_max"].notna().any():
        return "kv_bytes_used_max", 1.0 / MIB, "KV cache in use (MiB)"
    if frame["kv_blocks_used_max"].notna().any():
        return "kv_blocks_used_max", 1.0, "KV-cache blocks in use"
    if frame["kv_usage_max_ratio"].notna().any():
        return "kv_usage_max_ratio", 100.0, "KV-cache usage (% of blocks)"
    return None


def _interval_ms(value_s: float, low_s: float, high_s: float) -> str:
    if math.isnan(value_s):
        return "-"
    if math.isnan(low_s) or math.isnan(high_s):
        return "too few samples"
    return f"{low_s * 1e3:,.1f} - {high_s * 1e3:,.1f}"


def _interval_tok_s(low: float, high: float) -> str:
    return "-" if math.isnan(low) or math.isnan(high) else f"{low:,.0f} - {high:,.0f}"


TABLE_COLUMNS = [
    "prompt tokens",
    "scenario",
    "status",
    "TTFT p50 ms",
    "TTFT p50 95% CI ms",
    "TTFT p99 ms",
    "prefill tok/s",
    "prefill tok/s 95% CI",
    "total prompt tok/s",
    "TPOT p50 ms",
    "KV usage max (0-1)",
    "KV blocks in use max",
]


def sweep_table_frame(sweep: SweepSummary, frame: pd.DataFrame) -> pd.DataFrame:
    """The sweep as a table: one row per (length, level) of ``sweep_frame`` output, and a
    row giving the reason for each length the target could not hold, by length."""
    rows: list[list[object]] = []
    for point in sweep.points:
        if point.not_available is not None:
            rows.append(
                [point.input_tokens, "-", point.not_available] + [None] * (len(TABLE_COLUMNS) - 3)
            )
            continue
        for r in frame[frame["input_tokens"] == point.input_tokens].to_dict("records"):
            rows.append(
                [
                    point.input_tokens,
                    r["scenario"],
                    r["status"],
                    r["ttft_p50_s"] * 1e3,
                    _interval_ms(r["ttft_p50_s"], r["ttft_p50_low_s"], r["ttft_p50_high_s"]),
                    r["ttft_p99_s"] * 1e3,
                    r["prefill_tok_s"],
                    _interval_tok_s(r["prefill_low_tok_s"], r["prefill_high_tok_s"]),
                    r["total_prompt_tok_s"],
                    r["tpot_p50_s"] * 1e3,
                    r["kv_usage_max_ratio"],
                    r["kv_blocks_used_max"],
                ]
            )
    return pd.DataFrame(rows, columns=TABLE_COLUMNS)
