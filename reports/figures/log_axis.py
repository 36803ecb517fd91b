"""Readable ticks for a log axis: 1-2-5 steps, each labelled in full with its unit.

Plotly's own log ticks label the powers of ten in full and the digits between them as
bare small numbers, which reads as "4 5 6 7 ... 100 2 3". Here the ticks are given
explicitly: 1, 2 and 5 times each power of ten (3 too where that leaves fewer than three
in the range; only the powers themselves when the data span more than
``MAX_STEPPED_DECADES`` decades), every label a number with its unit ("20 ms"). A range
too narrow to hold two such ticks (a synthetic target's 10-11 ms ITL) gets evenly spaced
round values inside it instead, so no axis is left unlabelled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

STEPS = (1, 2, 5)
# Where 1-2-5 puts fewer than 3 ticks in the range (22-118 ms: 50, 100), 3 joins them.
FINE_STEPS = (1, 2, 3, 5)
MAX_STEPPED_DECADES = 4
# Round linear steps for a narrow range: about this many ticks inside it.
NARROW_TICKS = 4


@dataclass(frozen=True)
class Ticks:
    """Tick positions (data units) and their labels, for plotly's tickmode "array"."""

    values: tuple[float, ...]
    labels: tuple[str, ...]


def _decimal(mantissa: float, exponent: int) -> float:
    # Parsed from text: 5 * 10**-2 computed in floats is 0.05000000000000001.
    return float(f"{mantissa:g}e{exponent}")


def tick_text(value: float, unit: str) -> str:
    """``value`` with thousands separators and no float noise, then the unit."""
    return f"{value:,.12g} {unit}".strip()


def _stepped(low: float, high: float, steps: tuple[int, ...]) -> list[float]:
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    steps = steps if last - first <= MAX_STEPPED_DECADES else (1,)
    values = (_decimal(m, e) for e in range(first, last + 1) for m in steps)
    return [v for v in values if low <= v <= high]


def _narrow(low: float, high: float) -> list[float]:
    raw = (high - low) / NARROW_TICKS
    exponent = math.floor(math.log10(raw))
    # The smallest round step (1, 2 or 5 times a power of ten) not below the raw one.
    step = next(
        _decimal(m, e) for e in (exponent, exponent + 1) for m in STEPS if _decimal(m, e) >= raw
    )
    start = math.ceil(low / step)
    return [float(f"{k * step:.12g}") for k in range(start, math.floor(high / step) + 1)]


def log_ticks(low: float, high: float, unit: str) -> Ticks:
    """Ticks for data from ``low`` to ``high`` (positive, finite) on a log axis; none
    when the range cannot be drawn on one (a value <= 0 or not finite)."""
    if not (math.isfinite(low) and math.isfinite(high) and 0 < low <= high):
        return Ticks((), ())
    values = _stepped(low, high, STEPS)
    if len(values) < 3:
        values = _stepped(low, high, FINE_STEPS)
    if len(values) < 2:
        values = _narrow(low, high) if high > low else [low]
    return Ticks(tuple(values), tuple(tick_text(v, unit) for v in values))
