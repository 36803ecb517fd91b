import numpy as np
import pytest

from moeperf.suites.serving.load.arrivals import arrival_offsets_s, split_evenly, split_round_robin


def test_poisson_rate_and_window():
    offsets = arrival_offsets_s(200.0, 50.0, seed=3)
    assert offsets.min() >= 0 and offsets.max() < 50.0
    assert np.all(np.diff(offsets) > 0)
    # 10,000 expected arrivals: within 4 sigma (sigma = 100).
    assert abs(len(offsets) - 10_000) < 400
    gaps = np.diff(offsets)
    # Exponential gaps: coefficient of variation 1.
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.05)


def test_burstiness_changes_variability_not_rate():
    bursty = np.diff(arrival_offsets_s(100.0, 100.0, burstiness=0.25, seed=1))
    regular = np.diff(arrival_offsets_s(100.0, 100.0, burstiness=4.0, seed=1))
    assert bursty.mean() == pytest.approx(0.01, rel=0.1)
    assert regular.mean() == pytest.approx(0.01, rel=0.05)
    # CV of gamma gaps is 1/sqrt(shape).
    assert bursty.std() / bursty.mean() == pytest.approx(2.0, rel=0.15)
    assert regular.std() / regular.mean() == pytest.approx(0.5, rel=0.1)


def test_max_requests_bounds_the_schedule_and_seed_repeats_it():
    assert len(arrival_offsets_s(1000.0, 10.0, max_requests=17)) == 17
    a = arrival_offsets_s(5.0, 10.0, seed=9)
    assert np.array_equal(a, arrival_offsets_s(5.0, 10.0, seed=9))


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError, match="rate_rps"):
        arrival_offsets_s(0.0, 1.0)
    with pytest.raises(ValueError, match="burstiness"):
        arrival_offsets_s(1.0, 1.0, burstiness=0)


def test_splits_keep_every_arrival_and_share_evenly():
    offsets = np.arange(10) / 10
    shares = split_round_robin(offsets, 3)
    assert sorted(x for share in shares for x in share) == pytest.approx(list(offsets))
    assert split_evenly(10, 3) == [4, 3, 3]
    assert sum(split_evenly(257, 2)) == 257
