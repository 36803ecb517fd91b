"""Table cells the terminal tables share: a latency estimate in ms with its interval."""

from __future__ import annotations

from moeperf.collectors.quantiles import QuantileEstimate

DASH = "-"


def ms_cell(estimate: QuantileEstimate | None) -> str:
    """ "12.3 [11.0, 13.9]" (ms, the 95% interval); the value alone with too few samples."""
    if estimate is None:
        return DASH
    if estimate.ci_low is None or estimate.ci_high is None:
        return f"{estimate.value * 1e3:,.1f}"
    return (
        f"{estimate.value * 1e3:,.1f} [{estimate.ci_low * 1e3:,.1f}, {estimate.ci_high * 1e3:,.1f}]"
    )
