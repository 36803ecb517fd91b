"""The result of an SLO capacity search, as a serving run's summary holds it.

``suites/serving/capacity`` runs the search; each probe is a load level of the run (its
scenario in the summary has every number), and this record says which levels passed,
why, and where the capacity lies: between the highest level that passed and the lowest
that failed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

CapacityStatus = Literal["resolved", "probe_limit", "above_max", "below_min", "stopped"]


@dataclass(frozen=True, slots=True)
class CapacityProbe:
    """One probe in the order it ran: its level and scenario, and its verdict (None: it
    could not be judged) with the reason, criterion by criterion."""

    level: float
    scenario: str
    passed: bool | None
    reason: str
    phase: Literal["bracket", "bisect"]


@dataclass(frozen=True, slots=True)
class CapacitySummary:
    """``passed_level`` <= capacity < ``failed_level`` (None: no level passed / failed)."""

    mode: str  # "concurrency" (streams) or an open-loop mode (requests/s)
    criteria: str  # the SLOs as a sentence, e.g. "TTFT p99 <= 0.2 s and TPOT p99 <= 0.02 s"
    status: CapacityStatus
    passed_level: float | None
    failed_level: float | None
    probes: tuple[CapacityProbe, ...]
    # The criteria's limits (None: not a criterion), for charts and gates.
    ttft_p99_limit_s: float | None = None
    tpot_p99_limit_s: float | None = None
    min_goodput_ratio: float | None = None

    @property
    def unit(self) -> str:
        return "streams" if self.mode == "concurrency" else "requests/s"

    def answer(self) -> str:
        """Where the capacity lies, in words."""
        low, high, unit = self.passed_level, self.failed_level, self.unit
        if low is not None and high is not None:
            return f"between {low:g} (held) and {high:g} (failed) {unit}"
        if low is not None:
            return f"at least {low:g} {unit} (no probed level failed)"
        if high is not None:
            return f"below {high:g} {unit} (no probed level held)"
        return "not found (no probe was judged)"
