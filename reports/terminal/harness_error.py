"""A level's harness error, for the terminal: against the synthetic target only, the
total TTFT error and its two sides (collectors.serving_records.MeasurementErrors)."""

from __future__ import annotations

from moeperf.collectors.quantiles import Described
from moeperf.collectors.serving_records import ScenarioSummary


def _signed_ms(described: Described, q: float) -> str:
    value = described.value_at(q)
    return "-" if value is None else f"{value * 1e3:+.2f} ms"


def harness_error_line(scenario: str, entry: ScenarioSummary) -> str | None:
    """One line, or None where the target gave no stamps to check against."""
    errors = entry.harness_error_s
    if errors is None or not errors.ttft_total.count:
        return None
    return (
        f"{scenario} harness error ({errors.matched_requests} requests): TTFT total p50 "
        f"{_signed_ms(errors.ttft_total, 0.5)} (send p50 {_signed_ms(errors.send, 0.5)}, "
        f"receive p50 {_signed_ms(errors.ttft, 0.5)}), p99 {_signed_ms(errors.ttft_total, 0.99)}; "
        f"E2E total p50 {_signed_ms(errors.e2e_total, 0.5)}"
    )
