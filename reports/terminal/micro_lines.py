"""What ``moeperf runs show`` prints of a micro-benchmark run after its header."""

from __future__ import annotations

from moeperf.collectors.micro_summary import MicroSummary
from moeperf.collectors.store import RunReader
from moeperf.reports.terminal.presentation import Presentation


def micro_lines(summary: MicroSummary, reader: RunReader) -> Presentation:
    """What ``moeperf runs show`` prints of a micro run: how its percentiles were computed
    (its samples are in its report)."""
    line = f"percentiles: {summary.percentile_estimator}; CI: {summary.confidence_interval}"
    return Presentation(answer=[line])
