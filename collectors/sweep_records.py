"""The prompt lengths of a sweep run (``[sweep]``), as a serving run's summary holds them.

Every (length, level) pair that was sent is a scenario of the summary with all its
numbers, and its ``input_tokens``; this record keeps the lengths in order, the context
limit they were checked against, and those the target could not hold ("not available
from this target", never sent, so no scenario).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SweepPointSummary:
    """One prompt length: its scenarios (one per load level), or why it was not sent."""

    input_tokens: int
    scenarios: tuple[str, ...] = ()
    not_available: str | None = None


@dataclass(frozen=True, slots=True)
class SweepSummary:
    """The sweep's lengths, ascending, with the limit and output length they were fit to."""

    context_tokens: int | None  # the target's context limit (None: unknown)
    context_source: str  # where the limit was read
    max_output_tokens: int
    points: tuple[SweepPointSummary, ...]

    def not_available(self) -> tuple[SweepPointSummary, ...]:
        return tuple(p for p in self.points if p.not_available is not None)
