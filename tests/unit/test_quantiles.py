import numpy as np
import pytest

from collectors.quantiles import describe


def test_quantiles_match_numpy_and_carry_counts():
    values = np.random.default_rng(1).exponential(size=2000)
    result = describe(values)
    assert result["count"] == 2000
    p99 = result["quantiles"][2]
    assert p99["q"] == 0.99
    assert p99["value"] == pytest.approx(np.quantile(values, 0.99))
    assert p99["ci_low"] < p99["value"] < p99["ci_high"]


def test_too_few_samples_give_no_interval_rather_than_a_made_up_one():
    result = describe([0.1, 0.2, 0.3, 0.4, 0.5])
    p99 = result["quantiles"][2]
    assert p99["ci_low"] is None and p99["ci_high"] is None


def test_interval_covers_the_true_median_most_of_the_time():
    rng = np.random.default_rng(7)
    covered = 0
    for _ in range(400):
        est = describe(rng.exponential(size=200), quantiles=(0.5,))["quantiles"][0]
        covered += est["ci_low"] <= np.log(2) <= est["ci_high"]
    assert covered / 400 >= 0.92


def test_non_finite_values_are_dropped():
    assert describe([1.0, float("nan"), float("inf")])["count"] == 1
