"""The capacity search against known capacities: it must bracket the true one.

A prober that passes every level up to a threshold and fails above it is a target whose
capacity is exactly that threshold; whatever the start, growth and threshold, the search's
interval must contain it and be as narrow as its resolution, within its probe budget.
"""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from moeperf.suites.serving.capacity.search import SearchSettings, Verdict, capacity_search


def threshold_prober(capacity: float, seen: list[float]):
    def probe(level: float) -> Verdict:
        seen.append(level)
        return Verdict(level <= capacity, "held" if level <= capacity else "TTFT p99 over")

    return probe


@given(
    capacity=st.integers(min_value=1, max_value=500),
    start=st.integers(min_value=1, max_value=64),
    growth=st.sampled_from([1.5, 2.0, 3.0]),
)
def test_whole_streams_find_the_exact_capacity(capacity, start, growth):
    seen: list[float] = []
    settings = SearchSettings(start=start, growth=growth, max_level=1000, max_probes=40)
    result = capacity_search(threshold_prober(capacity, seen), settings)
    assert result.status == "resolved"
    assert (result.passed_level, result.failed_level) == (capacity, capacity + 1)
    # Every level probed once, and bracketing then bisection take O(log) probes.
    assert len(seen) == len(set(seen)) == len(result.steps)
    assert len(seen) <= 2 * math.ceil(math.log(1000, growth)) + 2
    assert all(level == int(level) for level in seen)


@given(
    capacity=st.floats(min_value=0.5, max_value=400.0),
    start=st.floats(min_value=0.5, max_value=50.0),
)
def test_a_rate_search_brackets_the_capacity_within_its_resolution(capacity, start):
    seen: list[float] = []
    settings = SearchSettings(
        start=start, min_level=0.1, max_level=1000.0, resolution=0.5, integer=False,
        max_probes=40,
    )  # fmt: skip
    result = capacity_search(threshold_prober(capacity, seen), settings)
    assert result.status == "resolved"
    assert result.passed_level is not None and result.failed_level is not None
    assert result.passed_level <= capacity < result.failed_level
    assert result.failed_level - result.passed_level <= 0.5


def test_a_target_that_passes_at_the_maximum_is_at_least_the_maximum():
    result = capacity_search(threshold_prober(10_000, []), SearchSettings(start=4, max_level=64))
    assert result.status == "above_max"
    assert (result.passed_level, result.failed_level) == (64, None)
    assert [s.level for s in result.steps] == [4, 8, 16, 32, 64]


def test_a_target_that_fails_even_at_the_minimum_is_below_it():
    result = capacity_search(threshold_prober(0, []), SearchSettings(start=8))
    assert result.status == "below_min"
    assert (result.passed_level, result.failed_level) == (None, 1)
    assert [s.level for s in result.steps] == [8, 4, 2, 1]


def test_the_probe_budget_leaves_the_bracket_it_reached():
    result = capacity_search(threshold_prober(37, []), SearchSettings(start=1, max_probes=8))
    assert result.status == "probe_limit"
    assert [s.phase for s in result.steps] == ["bracket"] * 7 + ["bisect"]
    assert result.passed_level is not None and result.failed_level is not None
    assert result.passed_level <= 37 < result.failed_level


def test_a_probe_that_cannot_be_judged_stops_the_search_where_it_was():
    def probe(level: float) -> Verdict:
        if level >= 16:
            return Verdict(None, "client-bound: the harness set the numbers")
        return Verdict(True, "held")

    result = capacity_search(probe, SearchSettings(start=4))
    assert result.status == "stopped"
    assert (result.passed_level, result.failed_level) == (8, None)
    assert result.steps[-1].reason.startswith("client-bound")
