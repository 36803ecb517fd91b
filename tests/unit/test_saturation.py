"""An open-loop level's signs of over-saturation (collectors/saturation.py), on levels whose
answer is known: a deterministic queue of ``servers`` slots, each request holding one for
``service_s``, fed arrivals at a fixed rate below and above its capacity."""

from __future__ import annotations

import heapq

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from moeperf.collectors.saturation import MIN_SAMPLES, saturation_of, slope

NS = 1_000_000_000
TTFT_S = 0.05


def queue_level(
    rate_per_s: float, servers: int, service_s: float, seconds: float, seed: int | None = None
) -> pd.DataFrame:
    """Request records of a FIFO queue: the first second warm-up, then measured. Arrivals
    at a fixed rate, or Poisson ones with ``seed``."""
    n = int(rate_per_s * seconds)
    arrivals = np.arange(n) / rate_per_s
    if seed is not None:
        arrivals = np.cumsum(np.random.default_rng(seed).exponential(1 / rate_per_s, n))
    free = [0.0] * servers
    rows = []
    for arrival in arrivals:
        start = max(arrival, heapq.heappop(free))
        heapq.heappush(free, start + service_s)
        rows.append({"intended_send_ns": int(arrival * NS), "send_ns": int(arrival * NS),
                     "first_token_ns": int((start + TTFT_S) * NS),
                     "done_ns": int((start + service_s) * NS), "status": "ok",
                     "phase": "warmup" if arrival < 1.0 else "measure"})  # fmt: skip
    return pd.DataFrame(rows)


def signs(level: pd.DataFrame):
    measured = level[level["phase"] == "measure"]
    ttft = (measured["first_token_ns"] - measured["intended_send_ns"]) / NS
    return saturation_of(level, ttft)


# 4 slots of 0.25 s: a capacity of 16 requests/s.
@pytest.mark.parametrize("rate", [4.0, 10.0, 14.0, 15.5])
def test_below_the_capacity_no_level_is_over_saturated(rate):
    s = signs(queue_level(rate, servers=4, service_s=0.25, seconds=8))
    assert s is not None and not s.over_saturated
    assert s.completions_per_s == pytest.approx(rate, rel=0.1)
    assert not s.in_flight.rising and not s.ttft.rising


@pytest.mark.parametrize("rate", [20.0, 24.0, 40.0])
def test_above_the_capacity_every_sign_shows(rate):
    s = signs(queue_level(rate, servers=4, service_s=0.25, seconds=8))
    assert s is not None and s.over_saturated
    assert s.completions_per_s == pytest.approx(16.0, rel=0.05)
    assert s.arrivals_per_s == pytest.approx(rate, rel=0.01)
    # The queue grows by what is not served: rate - 16 a second.
    assert s.in_flight.per_s == pytest.approx(rate - 16.0, rel=0.1)
    # Each arrival waits (rate - 16) / 16 s longer per second of the level.
    assert s.ttft.per_s == pytest.approx((rate - 16.0) / 16.0, rel=0.1)


@pytest.mark.parametrize("seed", range(20))
def test_poisson_arrivals_tell_06_of_the_capacity_from_15(seed):
    # Poisson arrivals queue now and then below the capacity too; the level is only
    # over-saturated when completions fall short as well. (Nearer the capacity a 7 s window
    # can hold more arrivals than the capacity by chance: collectors/saturation.py gives
    # how often each rate is flagged.)
    below = signs(queue_level(10.0, servers=4, service_s=0.25, seconds=8, seed=seed))
    above = signs(queue_level(24.0, servers=4, service_s=0.25, seconds=8, seed=seed))
    assert below is not None and not below.over_saturated
    assert above is not None and above.over_saturated


def test_a_level_too_short_to_tell_gets_no_verdict():
    level = queue_level(40.0, servers=4, service_s=0.25, seconds=1.0 + (MIN_SAMPLES - 1) / 40)
    assert signs(level) is None


def test_a_flat_but_noisy_ttft_is_not_rising():
    rng = np.random.default_rng(0)
    x = np.linspace(0, 10, 200)
    flat = slope(x, 0.05 + rng.normal(0, 0.01, x.size))
    assert not flat.rising and flat.margin > 0


@given(st.floats(-5, 5), st.floats(-100, 100), st.integers(3, 50))
def test_a_straight_line_has_its_own_slope_and_no_margin(gradient, offset, n):
    x = np.arange(n, dtype=float)
    line = slope(x, gradient * x + offset)
    assert line.per_s == pytest.approx(gradient, abs=1e-9)
    assert line.margin == pytest.approx(0.0, abs=1e-6)
    assert line.samples == n
