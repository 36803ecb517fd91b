"""Change points in a metric's history: found where the level shifts, not where it does not."""

from __future__ import annotations

import numpy as np
import pytest

from moeperf.reports.changepoint import change_points, metric_history, trend_warnings
from moeperf.reports.samples import MetricSamples


def test_a_level_shift_is_found_where_it_happened():
    rng = np.random.default_rng(1)
    series = np.r_[rng.normal(100, 1, 15), rng.normal(110, 1, 15)]
    (change,) = change_points(series, [f"v{i}" for i in range(30)])
    assert change.index == 15 and change.label == "v15"
    assert change.p_value < 0.05
    assert change.relative_change == pytest.approx(0.10, abs=0.02)


def test_two_shifts_are_both_found():
    rng = np.random.default_rng(2)
    series = np.r_[rng.normal(100, 1, 12), rng.normal(108, 1, 10), rng.normal(95, 1, 10)]
    assert [c.index for c in change_points(series)] == [12, 22]


def test_a_flat_series_has_no_change_points_at_about_alpha():
    found = 0
    for seed in range(100):
        series = np.random.default_rng(100 + seed).normal(100, 1, 20)
        found += bool(change_points(series, seed=seed))
    assert found <= 12  # alpha 0.05: 5 expected, 12 is beyond three standard errors


def test_short_or_broken_series():
    assert change_points([1.0, 2.0, 3.0]) == []
    with pytest.raises(ValueError, match="non-finite"):
        change_points([1.0, float("nan"), 3.0, 4.0])


def test_trend_warnings_only_for_recent_material_shifts():
    rng = np.random.default_rng(3)
    old = np.r_[rng.normal(100, 0.5, 10), rng.normal(120, 0.5, 20)]  # shift long ago
    new = np.r_[rng.normal(100, 0.5, 24), rng.normal(110, 0.5, 6)]  # shift in the last 6
    tiny = np.r_[rng.normal(100, 0.01, 24), rng.normal(100.5, 0.01, 6)]  # 0.5%: below 2%

    def points(values):
        return [(f"v{i}", float(v)) for i, v in enumerate(values[:-1])] + [
            ("candidate", float(values[-1]))
        ]

    history = {"old": points(old), "new": points(new), "tiny": points(tiny)}
    warnings = trend_warnings(history, recent=6, directions={"new": "lower"})
    assert [w.metric for w in warnings] == ["new"]
    assert "(worse)" in warnings[0].message and "not a failure" in warnings[0].message
    assert warnings[0].change.label == "v24"


def test_metric_history_takes_each_versions_point_value():
    def version(level):
        return [MetricSamples("c=1/itl_s", "p50", np.full(9, level), "lower", "latency", "s")]

    history = metric_history([("v1", version(1.0)), ("v2", version(2.0)), ("v3", [])])
    assert history == {"c=1/itl_s p50": [("v1", 1.0), ("v2", 2.0)]}
