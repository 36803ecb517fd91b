"""``load.stop_over_saturated``: an open-loop level watched while it runs, and ended once
it is over-saturated, so that a rate sweep does not spend minutes measuring a queue
(guidellm's ``--stop-over-saturated``).

The signs are collectors/saturation.py's, computed from what the parent knows as the level
runs: every arrival due by now (the workers' plans hold the schedule), every request ended
by now (its record). Checks start once the measured window has run ``MIN_MEASURED_S`` and
come every ``CHECK_INTERVAL_S``; the level ends when ``IN_A_ROW`` checks running say
over-saturated. Checking often is testing often, and an early window is short: a single
over-saturated check would stop levels below the capacity. How often a 10 s level (1 s
warm-up) of Poisson arrivals into 4 slots of 0.25 s is stopped, by offered load against the
capacity, and the median time of the stop (200 levels each, tests/unit/
test_saturation_watch.py's replay; the post-hoc verdict's rates are collectors/saturation.py's):

| first check, checks in a row | 0.8 | 0.9 | 1.0 | 1.1 | 1.25 | 1.5 |
|---|---|---|---|---|---|---|
| 2 s, 2 | 5% | 22.5% | 48.5% | 72.5% | 96.5% | 100%, at 3.5 s |
| 2 s, 3 | 2% | 14% | 39% | 68% | 94% | 100%, at 4.0 s |
| **3 s, 4 (these)** | **0%** | **7%** | **26%** | **57%** | **94%** | **100%, at 5.5 s** |
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from moeperf.collectors.latency import NS_PER_S, request_ttft_s
from moeperf.collectors.records import RequestRecord
from moeperf.collectors.saturation import signs
from moeperf.collectors.saturation_records import Saturation
from moeperf.suites.serving.load.plan import LevelPlan

CHECK_INTERVAL_S = 0.5
MIN_MEASURED_S = 3.0  # of the measured window, before the first check
IN_A_ROW = 4


@dataclass(frozen=True, slots=True)
class Stopped:
    """Why a level ended early: the signs of the check that stopped it, and when."""

    after_s: float  # from the level's start
    planned_s: float  # the level's duration as planned
    signs: Saturation

    def text(self, scenario: str) -> str:
        s = self.signs
        return (
            f"{scenario} stopped after {self.after_s:.1f} of {self.planned_s:g} s, "
            f"over-saturated (load.stop_over_saturated): {s.completions_per_s:.1f} "
            f"completions/s against {s.arrivals_per_s:.1f} arrivals/s, requests in flight "
            f"+{s.in_flight.per_s:.2f}/s, TTFT +{s.ttft.per_s * 1e3:.1f} ms/s; its requests "
            "still in flight were cancelled"
        )


@dataclass
class SaturationWatch:
    """One open-loop level's arrivals and ends as they come (``add``), checked by ``due``."""

    start_ns: int
    planned_s: float
    measure_from_ns: int
    measure_to_ns: int
    arrivals_ns: np.ndarray  # every arrival of the level, sorted
    _ends_s: list[float] = field(default_factory=list)
    _completions_s: list[float] = field(default_factory=list)
    _lags_s: list[float] = field(default_factory=list)
    _ttft_sent_s: list[float] = field(default_factory=list)
    _ttft_s: list[float] = field(default_factory=list)
    _next_check_ns: int = 0
    _in_a_row: int = 0

    @classmethod
    def of(cls, plans: dict[int, LevelPlan], anchor_ns: int) -> SaturationWatch:
        """The watch of the level ``plans`` plan, in the records' clock: monotonic ns
        since the run's ``anchor_ns`` (the plans' times are absolute)."""
        plan = next(iter(plans.values()))
        start = plan.start_ns - anchor_ns
        arrivals = sorted(start + int(a * 1e9) for p in plans.values() for a in p.arrivals_s)
        measure_from = start + int(plan.warmup_s * 1e9)
        return cls(
            start_ns=start,
            planned_s=plan.duration_s,
            measure_from_ns=measure_from,
            measure_to_ns=start + int((plan.duration_s - plan.cooldown_s) * 1e9),
            arrivals_ns=np.asarray(arrivals, dtype=np.int64),
            _next_check_ns=measure_from + int(MIN_MEASURED_S * 1e9),
        )

    def add(self, record: RequestRecord) -> None:
        """A request of the level ended."""
        done_s = record.done_ns / NS_PER_S
        self._ends_s.append(done_s)
        if record.status != "cancelled":
            self._completions_s.append(done_s)
        if record.phase != "measure":
            return
        sent_s = record.intended_send_ns / NS_PER_S
        self._lags_s.append(done_s - sent_s)
        # Its TTFT alone: this runs on every record the parent receives, and the chunk gaps
        # request_latencies would also compute are not needed here.
        ttft_s = request_ttft_s(record)
        if ttft_s is not None:
            self._ttft_sent_s.append(sent_s)
            self._ttft_s.append(ttft_s)

    def due(self, now_ns: int) -> Stopped | None:
        """At most every ``CHECK_INTERVAL_S``: the signs on what is known at ``now_ns``
        (the records' clock);
        a ``Stopped`` once ``IN_A_ROW`` checks running said over-saturated."""
        if now_ns < self._next_check_ns or now_ns >= self.start_ns + self.planned_s * 1e9:
            return None  # not yet; or its sending is over, and what is left only drains
        self._next_check_ns = now_ns + int(CHECK_INTERVAL_S * 1e9)
        due = self.arrivals_ns[self.arrivals_ns <= now_ns]
        measured = due[(due >= self.measure_from_ns) & (due < self.measure_to_ns)]
        found = signs(
            measured_arrivals_s=measured / NS_PER_S,
            arrivals_s=due / NS_PER_S,
            ends_s=np.asarray(self._ends_s),
            completions_s=np.asarray(self._completions_s),
            lags_s=np.asarray(self._lags_s),
            ttft_sent_s=np.asarray(self._ttft_sent_s),
            ttft_s=np.asarray(self._ttft_s),
            now_s=now_ns / NS_PER_S,
        )
        self._in_a_row = self._in_a_row + 1 if found is not None and found.over_saturated else 0
        if self._in_a_row < IN_A_ROW or found is None:
            return None
        return Stopped((now_ns - self.start_ns) / NS_PER_S, self.planned_s, found)
