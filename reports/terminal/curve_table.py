"""A serving run's answer for the terminal: one row per load level (the curve as a table),
with throughput, the latency percentiles that decide an operating point, and each level's
status. Per-level tables with every percentile and its interval are ``--verbose``
detail (reports/terminal/levels.py)."""

from __future__ import annotations

from collections.abc import Mapping

from rich.table import Table

from moeperf.collectors.serving_records import ScenarioSummary
from moeperf.collectors.units import ms_text


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def curve_table(scenarios: Mapping[str, ScenarioSummary]) -> Table:
    """Every level's throughput and TTFT / TPOT / ITL p50 and p99 (ms), and its status."""
    table = Table(
        title="per load level (measured requests; ms)",
        caption="p50 / p99 over ok requests; --verbose: every percentile with its 95% "
        "interval, and each level's target counters",
    )
    heads = ("level", "ok / sent", "req/s", "output tok/s", "TTFT p50", "TTFT p99",
             "TPOT p50", "TPOT p99", "ITL p50", "status")  # fmt: skip
    for i, head in enumerate(heads):
        left = i == 0 or head == "status"
        table.add_column(head, justify="left" if left else "right", no_wrap=i == 0)
    for name, entry in scenarios.items():
        latency = entry.latency_s
        table.add_row(
            name,
            f"{entry.ok} / {entry.requests}",
            _rate(entry.request_throughput_rps),
            _rate(entry.output_throughput_tok_s),
            ms_text(latency.ttft_s.value_at(0.5)),
            ms_text(latency.ttft_s.value_at(0.99)),
            ms_text(latency.tpot_s.value_at(0.5)),
            ms_text(latency.tpot_s.value_at(0.99)),
            ms_text(latency.itl_s.value_at(0.5)),
            # The word only: the reason is the run's status reason, printed at the end; an
            # over-saturated level's evidence is a line of the answer (serving_lines.py).
            entry.status + (", over-saturated" if _over_saturated(entry) else ""),
        )
    return table


def _over_saturated(entry: ScenarioSummary) -> bool:
    return entry.saturation is not None and entry.saturation.over_saturated
