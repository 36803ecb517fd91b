"""Seconds to milliseconds, for the tables and charts that show latencies in ms: one
conversion, and one way of writing a value that is not known."""

from __future__ import annotations

import math

NOT_KNOWN = "-"


def to_ms(value_s: float | None) -> float | None:
    """``value_s`` in milliseconds; None stays None (a chart leaves a gap)."""
    return None if value_s is None else value_s * 1e3


def ms_text(value_s: float | None, decimals: int = 2) -> str:
    """``value_s`` in milliseconds as text ("12.35"); "-" where unknown or not finite."""
    if value_s is None or not math.isfinite(value_s):
        return NOT_KNOWN
    return f"{value_s * 1e3:.{decimals}f}"
