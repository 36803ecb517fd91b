"""The gate's statistics: exact bootstrap, rank tests, BH, sample-size and effect rules."""

from __future__ import annotations

import numpy as np
import pytest

from moeperf.reports import stats
from moeperf.reports.stats import (
    benjamini_hochberg,
    bootstrap_ratio_ci,
    bootstrap_statistic,
    mann_whitney,
    min_effect_for,
    min_samples,
    point_value,
    quantile_of,
    quantile_test,
    rank_test,
)


@pytest.mark.parametrize("q", [0.5, 0.9, 0.99, 0.37])
def test_order_statistic_bootstrap_matches_resampling(q):
    rng = np.random.default_rng(1)
    x = rng.exponential(size=60)
    exact = bootstrap_statistic(x, f"p{q * 100:g}", 20_000, rng)
    brute = np.quantile(x[rng.integers(0, 60, size=(20_000, 60))], q, axis=1)
    assert exact.mean() == pytest.approx(brute.mean(), rel=0.02)
    assert exact.std() == pytest.approx(brute.std(), rel=0.05)
    for level in (0.025, 0.5, 0.975):
        assert np.quantile(exact, level) == pytest.approx(np.quantile(brute, level), rel=0.05)


def test_mean_bootstrap_matches_the_standard_error():
    rng = np.random.default_rng(2)
    x = rng.normal(10, 2, size=400)
    boot = bootstrap_statistic(x, "mean", 4000, rng)
    assert boot.mean() == pytest.approx(x.mean(), rel=1e-3)
    assert boot.std() == pytest.approx(x.std() / np.sqrt(400), rel=0.08)


def test_ratio_interval_covers_the_true_ratio():
    rng = np.random.default_rng(3)
    covered = 0
    for _ in range(100):
        a = rng.lognormal(0, 0.5, 500)
        b = rng.lognormal(0, 0.5, 500) * 1.1
        ci = bootstrap_ratio_ci(a, b, "p50", rng=rng)
        assert ci is not None
        low, high = ci
        covered += low <= 1.1 <= high
    assert covered >= 88


def test_large_samples_give_tight_intervals_around_the_true_ratio():
    # 50k samples per side (the size of a long run's ITL); speed is not asserted here.
    rng = np.random.default_rng(4)
    a, b = rng.lognormal(size=50_000), rng.lognormal(size=50_000)
    for statistic in ("p50", "p99", "mean"):
        ci = bootstrap_ratio_ci(a, b, statistic, n_boot=2000, rng=rng)
        assert ci is not None
        low, high = ci
        assert low <= 1.0 <= high
        assert high - low < 0.2


def test_mean_of_huge_samples_is_subsampled_to_the_cap_and_stays_sane():
    rng = np.random.default_rng(5)
    a = rng.normal(100, 5, size=stats.MEAN_RESAMPLE_CAP * 3)
    ci = bootstrap_ratio_ci(a, a * 1.2, "mean", rng=rng)
    assert ci is not None
    low, high = ci
    assert low < 1.2 < high
    assert high - low < 0.01


def test_ratio_undefined_when_the_baseline_is_not_positive():
    assert bootstrap_ratio_ci(np.zeros(50), np.ones(50), "mean") is None
    assert bootstrap_ratio_ci(np.array([]), np.ones(50), "mean") is None


def test_mann_whitney_is_one_sided_in_the_regression_direction():
    rng = np.random.default_rng(6)
    a = rng.normal(1.0, 0.1, 300)
    slower = a * 1.1
    assert mann_whitney(a, slower, "lower") < 1e-6  # lower is better: slower is worse
    assert mann_whitney(a, slower, "higher") > 0.99  # higher is better: it improved
    assert mann_whitney(a, slower, None) < 1e-6


def test_quantile_test_sees_a_tail_regression_the_rank_test_misses():
    rng = np.random.default_rng(7)
    a = rng.lognormal(0, 0.3, 5000)
    b = rng.lognormal(0, 0.3, 5000)
    tail = b > np.quantile(b, 0.98)
    b[tail] *= 1.5  # only the top 2% got slower
    assert mann_whitney(a, b, "lower") > 0.05
    assert quantile_test(a, b, 0.99, "lower") < 1e-6
    assert rank_test(a, b, "p99", "lower")[1].startswith("brown-mood")
    assert rank_test(a, b, "p50", "lower")[1] == "mann-whitney"


def test_tests_hold_their_size_under_no_change():
    rng = np.random.default_rng(8)
    p_mw, p_q = [], []
    for _ in range(400):
        a, b = rng.exponential(size=400), rng.exponential(size=400)
        p_mw.append(mann_whitney(a, b, "lower"))
        p_q.append(quantile_test(a, b, 0.9, "lower"))
    # One-sided 5% tests: the rate of p < 0.05 is at most 5% plus sampling noise.
    assert np.mean(np.array(p_mw) < 0.05) <= 0.05 + 0.03
    assert np.mean(np.array(p_q) < 0.05) <= 0.05 + 0.03


def test_benjamini_hochberg_adjusts_as_defined():
    p = [0.01, 0.04, 0.03, 0.2]
    # Sorted 0.01, 0.03, 0.04, 0.2 -> x 4/1, 4/2, 4/3, 4/4 = .04, .06, .0533, .2 -> monotone
    expected = [0.04, 0.0533333, 0.0533333, 0.2]
    assert benjamini_hochberg(p) == pytest.approx(expected, rel=1e-5)
    assert len(benjamini_hochberg([])) == 0


def test_benjamini_hochberg_without_scipys_helper(monkeypatch):
    p = np.random.default_rng(9).uniform(size=20) ** 3
    expected = benjamini_hochberg(p)
    import scipy.stats

    monkeypatch.delattr(scipy.stats, "false_discovery_control")
    assert benjamini_hochberg(p) == pytest.approx(expected)


def test_minimum_samples_follow_the_order_statistic_interval():
    assert min_samples("p99") == 368  # 0.99 ** 368 < 0.025 <= 0.99 ** 367
    assert min_samples("p90") == 36
    assert min_samples("p50") == stats.MIN_SAMPLES
    assert min_samples("mean") == stats.MIN_SAMPLES
    assert min_samples("median") == stats.MIN_SAMPLES


def test_minimum_effect_overrides_by_key_then_name_then_class():
    assert min_effect_for("c=1/ttft_s", "p50", "latency") == 0.05
    assert min_effect_for("c=1/ttft_s", "p99", "latency") == 0.20  # tails: "latency_p99"
    assert min_effect_for("bench", "median", "micro") == 0.10
    overrides = {"c=1/ttft_s p99": 0.3, "c=1/ttft_s": 0.15, "latency": 0.01}
    assert min_effect_for("c=1/ttft_s", "p99", "latency", overrides) == 0.3
    assert min_effect_for("c=1/ttft_s", "p50", "latency", overrides) == 0.15
    assert min_effect_for("c=1/itl_s", "p50", "latency", overrides) == 0.01
    # Any override that names the metric wins over every default, the tail's included.
    assert min_effect_for("c=1/itl_s", "p99", "latency", overrides) == 0.01
    assert min_effect_for("c=1/itl_s", "p99", "latency", {"latency_p99": 0.1}) == 0.1
    assert min_effect_for("x", "mean", "unknown-class") == stats.FALLBACK_MIN_EFFECT


def test_a_metric_key_sets_one_metric_at_every_level_and_beats_its_class():
    effects = {"ttft_s_p99": 0.08, "latency_p99": 0.3, "latency": 0.02}
    assert min_effect_for("c=32/ttft_s", "p99", "latency", effects) == 0.08
    assert min_effect_for("c=1/ttft_s", "p99", "latency", effects) == 0.08
    assert min_effect_for("c=32/itl_s", "p99", "latency", effects) == 0.3  # its class
    assert min_effect_for("c=32/ttft_s", "p50", "latency", effects) == 0.02
    # The level's own key is still the most specific.
    assert min_effect_for("c=1/ttft_s", "p99", "latency", {**effects, "c=1/ttft_s": 0.5}) == 0.5


def test_statistics_by_name():
    assert quantile_of("p99") == 0.99
    assert quantile_of("p99.9") == pytest.approx(0.999)
    assert quantile_of("median") == 0.5
    assert quantile_of("mean") is None
    with pytest.raises(ValueError, match="valid: mean"):
        quantile_of("p100")
    values = np.arange(101.0)
    assert point_value(values, "p99") == 99.0
    assert point_value(values, "mean") == 50.0
