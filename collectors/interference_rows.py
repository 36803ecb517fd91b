"""Prefill interference as rows: each arm's quiet and mixed ITL and its long prompts' TTFT,
read from the arm's scenarios in the serving summary (the terminal table, the report)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from moeperf.collectors.interference_records import InterferenceSummary
from moeperf.collectors.quantiles import Described, QuantileEstimate
from moeperf.collectors.serving_records import ScenarioSummary


@dataclass(frozen=True, slots=True)
class InterferenceRow:
    """One arm's result: the decoders' ITL alone and with long prompts arriving, and the
    long prompts' TTFT, each a quantile estimate of its scenario (None: no sample)."""

    chunked_prefill_size: int
    quiet_itl_p50_s: QuantileEstimate | None
    mixed_itl_p50_s: QuantileEstimate | None
    quiet_itl_p99_s: QuantileEstimate | None
    mixed_itl_p99_s: QuantileEstimate | None
    prefill_ttft_p50_s: QuantileEstimate | None
    prefill_ttft_p99_s: QuantileEstimate | None


def interference_rows(
    summary: InterferenceSummary, scenarios: Mapping[str, ScenarioSummary]
) -> list[InterferenceRow]:
    """One row per arm, in the order run, from the arms' scenarios of the summary."""
    rows = []
    for arm in summary.arms:
        quiet, decode, prefill = (
            scenarios.get(name)
            for name in (arm.quiet_scenario, arm.decode_scenario, arm.prefill_scenario)
        )

        def at(entry: ScenarioSummary | None, metric: str, q: float) -> QuantileEstimate | None:
            if entry is None:
                return None
            described: Described = getattr(entry.latency_s, metric)
            return described.at(q)

        rows.append(
            InterferenceRow(
                arm.chunked_prefill_size,
                at(quiet, "itl_s", 0.5),
                at(decode, "itl_s", 0.5),
                at(quiet, "itl_s", 0.99),
                at(decode, "itl_s", 0.99),
                at(prefill, "ttft_s", 0.5),
                at(prefill, "ttft_s", 0.99),
            )
        )
    return rows
