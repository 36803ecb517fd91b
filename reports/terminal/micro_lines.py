"""What ``moeperf runs show`` prints of a micro-benchmark run after its header."""

from __future__ import annotations

from moeperf.collectors.micro_summary import MicroSummary
from moeperf.collectors.store import RunReader


def micro_lines(summary: MicroSummary, reader: RunReader) -> list[str]:
    """What ``moeperf runs show`` prints of a micro run after its header."""
    return [f"percentiles: {summary.percentile_estimator}; CI: {summary.confidence_interval}"]
