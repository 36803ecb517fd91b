"""Interleaved scenarios compared at one pace (suites.training.predict.paired_step_s): a
host whose speed drifts from round to round slows every scenario's step of that round
alike, and the paired figure takes that drift out where a median over the run keeps it."""

from __future__ import annotations

import dataclasses
import statistics

import pytest

from moeperf.collectors.records import StepRecord
from moeperf.collectors.training_summary import PredictedScenario, ScenarioOutcome
from moeperf.suites.training.predict import paired_step_s

S = 1_000_000_000
# The host's pace per round: round 0 is a fresh trainer's warm-up, left out.
PACE = [3.0, 1.0, 1.3, 0.8, 1.5, 1.1, 0.9, 1.4, 1.0]


def outcome(name: str, step_s: float, paces: list[float]) -> ScenarioOutcome:
    records, at = [], 0.0
    for n, pace in enumerate(paces):
        time_s = step_s * pace
        start_ns, end_ns = int(at * S), int((at + time_s) * S)
        records.append(StepRecord(n, 0, start_ns, end_ns, tokens=100, scenario=name))
        at += time_s
    policy, skew = name.split("/")
    return ScenarioOutcome(name, policy, skew, "", None, records=records)


def test_the_paired_step_is_the_true_ratio_at_the_fitted_pace():
    fitted = outcome("keep-all/calm", 2.0, PACE)
    other = outcome("full-recompute/calm", 2.6, PACE)  # 1.3 x the fitted scenario's work
    found = paired_step_s(other, fitted)
    assert found is not None
    step_s, rounds = found.step_s, found.rounds
    assert rounds == len(PACE) - 1
    fitted_median = statistics.median(r.step_time_s for r in fitted.records[1:])
    assert step_s == pytest.approx(1.3 * fitted_median)


def test_drift_between_scenarios_is_cancelled_only_by_pairing():
    fitted = outcome("keep-all/calm", 2.0, PACE)
    # The same work on a host 40% slower for the later scenario's rounds only: a median
    # over each scenario's own steps calls it 40% slower; paired with the fitted scenario's
    # steps of the same (also slower) rounds, it is the same.
    slow = [p * 1.4 for p in PACE]
    later = outcome("selective/calm", 2.0, slow)
    slowed_fitted = outcome("keep-all/calm", 2.0, slow)
    raw = statistics.median(r.step_time_s for r in later.records[1:])
    assert raw / statistics.median(r.step_time_s for r in fitted.records[1:]) == pytest.approx(1.4)
    found = paired_step_s(later, slowed_fitted)
    assert found is not None
    assert found.step_s == pytest.approx(
        statistics.median(r.step_time_s for r in slowed_fitted.records[1:])
    )


def test_a_scenario_that_stopped_early_pairs_the_rounds_it_ran():
    fitted = outcome("keep-all/calm", 2.0, PACE)
    stopped = outcome("keep-all/spiky", 2.0, PACE[:4])  # gave up after 4 steps
    found = paired_step_s(stopped, fitted)
    assert found is not None and found.rounds == 3
    assert paired_step_s(outcome("keep-all/spiky", 2.0, PACE[:1]), fitted) is None


def test_the_error_is_taken_against_the_paired_figure_where_there_is_one():
    median_only = PredictedScenario(2.2, 3.0, 1, 1, 0, 0, False)
    assert median_only.step_error == pytest.approx(2.2 / 3.0 - 1)
    paired = dataclasses.replace(median_only, measured_step_s_paired=2.0, paired_rounds=7)
    assert paired.step_error == pytest.approx(0.1)


def test_the_interval_holds_the_point_and_shrinks_to_it_when_every_round_agrees():
    fitted = outcome("keep-all/calm", 2.0, PACE)
    exact = paired_step_s(outcome("selective/calm", 2.2, PACE), fitted)
    assert exact is not None
    assert exact.step_s_ci == pytest.approx((exact.step_s, exact.step_s))
    jitter = [1.0, 1.2, 0.85, 1.1, 0.9, 1.15, 0.95, 1.05, 1.0]  # this scenario's own noise
    noisy = outcome("selective/calm", 2.2, [p * j for p, j in zip(PACE, jitter, strict=True)])
    found = paired_step_s(noisy, fitted)
    assert found is not None
    low, high = found.step_s_ci
    assert low < found.step_s < high
    predicted = PredictedScenario(4.4, 0.0, 1, 1, 0, 0, False,
                                  measured_step_s_paired=found.step_s,
                                  measured_step_s_paired_ci=found.step_s_ci)  # fmt: skip
    error = predicted.step_error
    interval = predicted.step_error_ci
    assert error is not None and interval is not None
    assert interval[0] < error < interval[1]
