"""The capacity search: the highest load level at which the SLOs hold, as an interval.

Bracketing, then bisection, over load levels (streams, closed loop: whole numbers; or
requests/s, open loop). From ``start`` the level grows by ``growth`` while its probe
passes, until one fails (the bracket is found) or ``max_level`` passes (the capacity is
at least that); a failing ``start`` shrinks by ``growth`` until one passes or
``min_level`` fails too. Then the bracket [highest pass, lowest fail] is halved until it
is no wider than ``resolution`` (whole streams: until the two levels are adjacent) or
``max_probes`` have run.

The search assumes that a level whose SLOs fail fails at every higher level (monotone
load); a probe is a measurement with noise, so the answer is the interval between the
probes that bound it, never a single number. Measuring a probe is the caller's
(``Prober``): this module only decides where to probe next.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

# "resolved": the bracket is no wider than the resolution. "probe_limit": max_probes ran
# out first (the bracket stands, wider). "above_max": max_level passed, so the capacity
# is at least that. "below_min": even min_level failed. "stopped": a probe could not be
# judged (a client-bound level), so the search ended where it was.
SearchStatus = Literal["resolved", "probe_limit", "above_max", "below_min", "stopped"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """A probe's outcome: whether the SLOs held (None: it could not be judged) and why."""

    passed: bool | None
    reason: str


@dataclass(frozen=True, slots=True)
class ProbeStep:
    """One probe, in the order run: its level, its verdict, and the search phase."""

    level: float
    passed: bool | None
    reason: str
    phase: Literal["bracket", "bisect"]


@dataclass(frozen=True, slots=True)
class SearchSettings:
    start: float
    growth: float = 2.0
    max_level: float = 1024.0
    min_level: float = 1.0
    resolution: float = 1.0
    max_probes: int = 12
    integer: bool = True  # closed loop: streams are whole numbers


@dataclass(frozen=True, slots=True)
class SearchResult:
    """The capacity lies in [passed_level, failed_level]: the highest level that passed and
    the lowest that failed (None: none did)."""

    status: SearchStatus
    passed_level: float | None
    failed_level: float | None
    steps: tuple[ProbeStep, ...]


Prober = Callable[[float], Verdict]


def _grow(level: float, s: SearchSettings) -> float:
    grown = level * s.growth
    if s.integer:
        grown = max(level + 1, math.ceil(grown))
    return min(grown, s.max_level)


def _shrink(level: float, s: SearchSettings) -> float:
    shrunk = level / s.growth
    if s.integer:
        shrunk = min(level - 1, math.floor(shrunk))
    return max(shrunk, s.min_level)


def _narrow_enough(low: float, high: float, s: SearchSettings) -> bool:
    if s.integer:
        return high - low <= max(1, math.floor(s.resolution))
    return high - low <= s.resolution


def _middle(low: float, high: float, s: SearchSettings) -> float:
    return float((int(low) + int(high)) // 2) if s.integer else (low + high) / 2


def capacity_search(probe: Prober, settings: SearchSettings) -> SearchResult:
    """Run the search, calling ``probe(level)`` once per level it needs."""
    s = settings
    steps: list[ProbeStep] = []
    passed: float | None = None
    failed: float | None = None

    def run(level: float, phase: Literal["bracket", "bisect"]) -> bool | None:
        verdict = probe(level)
        steps.append(ProbeStep(level, verdict.passed, verdict.reason, phase))
        return verdict.passed

    def result(status: SearchStatus) -> SearchResult:
        return SearchResult(status, passed, failed, tuple(steps))

    level = min(max(s.start, s.min_level), s.max_level)
    outcome = run(level, "bracket")
    if outcome is None:
        return result("stopped")
    going_up = outcome
    while True:
        if outcome:
            passed = level
        else:
            failed = level
        if passed is not None and failed is not None:
            break
        if len(steps) >= s.max_probes:
            return result("probe_limit")
        if going_up and level >= s.max_level:
            return result("above_max")
        if not going_up and level <= s.min_level:
            return result("below_min")
        level = _grow(level, s) if going_up else _shrink(level, s)
        outcome = run(level, "bracket")
        if outcome is None:
            return result("stopped")
    while not _narrow_enough(passed, failed, s):
        if len(steps) >= s.max_probes:
            return result("probe_limit")
        middle = _middle(passed, failed, s)
        outcome = run(middle, "bisect")
        if outcome is None:
            return result("stopped")
        if outcome:
            passed = middle
        else:
            failed = middle
    return result("resolved")
