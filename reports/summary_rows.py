"""A serving scenario's summary in long form: one row per metric, with interval and count.

What a baseline trend follows (``BaselineStore.trend``): the per-scenario scalars of
``collectors.serving_records.ScenarioSummary`` under their field names, then per latency
metric its mean and each of its quantiles ("ttft_s.mean", "ttft_s.p50", ...). A value
that was not measured is NaN; scalars have no interval and no sample count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from moeperf.collectors.serving_records import ScenarioSummary


@dataclass(frozen=True, slots=True)
class MetricRow:
    metric: str
    value: float
    ci_low: float
    ci_high: float
    count: int | None


def _number(value: float | None) -> float:
    return math.nan if value is None else float(value)


def _scalars(entry: ScenarioSummary) -> tuple[tuple[str, float | None], ...]:
    return (
        ("requests", entry.requests),
        ("ok", entry.ok),
        ("errors", entry.errors),
        ("cancelled", entry.cancelled),
        ("window_s", entry.window_s),
        ("output_tokens", entry.output_tokens),
        ("output_throughput_tok_s", entry.output_throughput_tok_s),
        ("request_throughput_rps", entry.request_throughput_rps),
        ("goodput_rps", entry.goodput_rps),
        ("goodput_ratio", entry.goodput_ratio),
    )


def metric_rows(entry: ScenarioSummary) -> list[MetricRow]:
    """The rows of one scenario: its scalars, then each latency's mean and quantiles."""
    nan = math.nan
    rows = [MetricRow(m, _number(value), nan, nan, None) for m, value in _scalars(entry)]
    for latency, stats in entry.latency_s.named():
        rows.append(MetricRow(f"{latency}.mean", _number(stats.mean), nan, nan, stats.count))
        rows += [
            MetricRow(
                f"{latency}.{q.label}",
                _number(q.value),
                _number(q.ci_low),
                _number(q.ci_high),
                stats.count,
            )
            for q in stats.quantiles
        ]
    return rows
