"""Energy, power, utilisation and memory figures against hand-built series."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from moeperf.collectors.accel_figures import (
    accelerator_figures,
    span,
    training_figures,
    trapezoid,
)
from moeperf.collectors.accel_records import AcceleratorFigures, DeviceSample, Unavailable

S = 1_000_000_000  # ns


def sample(t_s: float, **fields: Any) -> DeviceSample:
    base: dict[str, Any] = dict(
        t_ns=round(t_s * S),
        source="nvml",
        device="gpu0",
        name="NVIDIA H200",
        host="h",
        utilization_ratio=None,
        memory_used_bytes=None,
        memory_total_bytes=None,
        power_w=None,
        energy_j=None,
        sm_clock_hz=None,
        memory_clock_hz=None,
        temperature_c=None,
        throttle_reasons=None,
        cpu_ratio=None,
        rss_bytes=None,
        scenario="",
    )
    return DeviceSample(**{**base, **fields})


def figures(
    samples: list[DeviceSample], start_s: float, end_s: float, **kw: Any
) -> AcceleratorFigures:
    result = accelerator_figures(samples, round(start_s * S), round(end_s * S), **kw)
    assert isinstance(result, AcceleratorFigures), result
    return result


def test_constant_300_w_for_10_s_is_3000_j_by_the_power_integral() -> None:
    series = [sample(t, power_w=300.0) for t in range(11)]  # 0, 1, ..., 10 s
    f = figures(series, 0, 10)
    (gpu,) = f.devices
    assert gpu.energy_j == pytest.approx(3000.0) and gpu.energy_source == "power integral"
    assert gpu.power_mean_w == pytest.approx(300.0) and gpu.covered_s == pytest.approx(10.0)
    assert f.energy_j == pytest.approx(3000.0) and f.energy_source == "power integral"


def test_the_energy_counter_wins_over_the_power_integral() -> None:
    # The counter goes 1000 J -> 4000 J over the window; the power readings (100 W) would
    # say 1000 J: the counter is what the device measured between reads.
    series = [sample(t, power_w=100.0, energy_j=1000.0 + 300.0 * t) for t in range(11)]
    (gpu,) = figures(series, 0, 10).devices
    assert gpu.energy_j == pytest.approx(3000.0) and gpu.energy_source == "counter"
    assert gpu.power_mean_w == pytest.approx(100.0)  # the power figure stays the readings'


def test_edges_are_interpolated_between_the_readings_around_them() -> None:
    # Reads at -0.5, 0.5, ..., 10.5 s: the window [0, 10 s) has none at its edges. The counter
    # (300 W) interpolated to 0 and 10 s gives 3000 J (its readings inside alone: 2700 J);
    # the ramp P = 100 + 10 t interpolated likewise integrates to 1000 + 500 = 1500 J.
    times = [t - 0.5 for t in range(12)]
    counter = [sample(t, energy_j=1000.0 + 300.0 * t) for t in times]
    (gpu,) = figures(counter, 0, 10).devices
    assert gpu.energy_j == pytest.approx(3000.0) and gpu.energy_source == "counter"
    ramp = [sample(t, power_w=100.0 + 10.0 * t) for t in times]
    (gpu,) = figures(ramp, 0, 10).devices
    assert gpu.energy_j == pytest.approx(1500.0) and gpu.energy_source == "power integral"
    assert gpu.power_mean_w == pytest.approx(150.0) and gpu.covered_s == pytest.approx(10.0)


def test_a_window_the_sampler_did_not_cover_whole_says_so() -> None:
    # Sampling started at 2 s and stopped at 8 s: nothing to interpolate from outside.
    series = [sample(t, power_w=300.0) for t in range(2, 9)]
    (gpu,) = figures(series, 0, 10).devices
    assert gpu.covered_s == pytest.approx(6.0) and gpu.energy_j == pytest.approx(1800.0)


def test_energy_per_token_request_and_tokens_per_joule() -> None:
    series = [sample(t, energy_j=1000.0 + 300.0 * t) for t in range(11)]
    f = figures(series, 0, 10, tokens=1000, requests=10)
    assert f.energy_per_token_j == pytest.approx(3.0)
    assert f.energy_per_request_j == pytest.approx(300.0)
    assert f.tokens_per_j == pytest.approx(1 / 3)
    assert f.energy_per_step_j is None and f.steps is None
    zero = figures(series, 0, 10, tokens=0, requests=0)
    assert zero.energy_per_token_j is None and zero.energy_per_request_j is None
    assert zero.tokens_per_j == 0.0  # no token for 3000 J: a real figure


def test_one_sample_in_the_window_gives_none_not_zero() -> None:
    series = [sample(0, power_w=300.0, energy_j=10.0, utilization_ratio=0.5)]
    f = figures(series, 0, 10, tokens=100)
    (gpu,) = f.devices
    assert gpu.samples == 1
    assert gpu.energy_j is None and gpu.power_mean_w is None and gpu.utilization_max_ratio is None
    assert f.energy_j is None and f.energy_per_token_j is None and f.tokens_per_j is None


def test_no_sample_in_the_window_is_unavailable() -> None:
    series = [sample(t, power_w=300.0) for t in range(5)]
    result = accelerator_figures(series, 10 * S, 20 * S)
    assert isinstance(result, Unavailable) and "no accelerator sample" in result.reason


def test_a_counter_reset_or_gap_falls_back_to_the_power_integral() -> None:
    reset = [
        sample(t, power_w=200.0, energy_j=[500.0, 700.0, 5.0, 205.0, 405.0][t]) for t in range(5)
    ]
    (gpu,) = figures(reset, 0, 4).devices
    assert gpu.energy_source == "power integral" and gpu.energy_j == pytest.approx(800.0)
    # The reading before the window lacks the counter: its edge cannot be interpolated.
    gap = [sample(t, power_w=200.0, energy_j=None if t == 0 else 200.0 * t) for t in range(6)]
    (gpu,) = figures(gap, 0.5, 5).devices
    assert gpu.energy_source == "power integral" and gpu.energy_j == pytest.approx(900.0)


def test_utilisation_memory_and_the_mean_over_uneven_reads() -> None:
    total = 143771 << 20
    series = [
        sample(0, utilization_ratio=0.2, memory_used_bytes=70_000 << 20, memory_total_bytes=total),
        # 1 s of 0.2 -> 1.0 then 3 s at 1.0: time-weighted 0.9 (the plain mean of reads: 0.73)
        sample(1, utilization_ratio=1.0, memory_used_bytes=131_500 << 20, memory_total_bytes=total),
        sample(4, utilization_ratio=1.0, memory_used_bytes=120_000 << 20, memory_total_bytes=total),
    ]
    (gpu,) = figures(series, 0, 5).devices
    assert gpu.utilization_mean_ratio == pytest.approx(3.6 / 4)
    assert gpu.utilization_max_ratio == 1.0
    assert gpu.memory_peak_bytes == 131_500 << 20
    assert gpu.memory_peak_ratio == pytest.approx(131_500 / 143771)


def test_totals_sum_the_accelerators_and_leave_the_process_out() -> None:
    def gpu(device: str, watts: float) -> list[DeviceSample]:
        return [sample(t, device=device, energy_j=watts * t) for t in range(11)]

    process = [
        sample(t, source="process", device="pid:1", rss_bytes=(1 + t) << 30, cpu_ratio=1.5)
        for t in range(11)
    ]
    f = figures(gpu("gpu0", 300) + gpu("gpu1", 200) + process, 0, 10, tokens=5000)
    assert [d.device for d in f.devices] == ["gpu0", "gpu1", "pid:1"]
    assert f.energy_j == pytest.approx(5000.0) and f.energy_per_token_j == pytest.approx(1.0)
    proc = f.devices[2]
    assert proc.energy_j is None and proc.rss_peak_bytes == 10 << 30  # 9 s: the last inside
    assert proc.cpu_mean_ratio == pytest.approx(1.5)
    # One GPU without any energy figure: no total (a partial sum would look like a saving).
    silent = [sample(t, device="gpu2", utilization_ratio=0.5) for t in range(11)]
    f = figures(gpu("gpu0", 300) + silent, 0, 10, tokens=5000)
    assert f.energy_j is None and f.energy_per_token_j is None and f.power_mean_w is None


def test_a_restarted_process_is_the_one_that_ran_and_a_missing_gpu_stays() -> None:
    # The target restarted at 10 s (a new pid); gpu1 was read only before 10 s.
    old = [sample(t, source="process", device="pid:1", rss_bytes=1 << 30) for t in range(10)]
    new = [sample(t, source="process", device="pid:2", rss_bytes=2 << 30) for t in range(10, 21)]
    gpus = [sample(t, device="gpu0", energy_j=100.0 * t) for t in range(21)]
    gone = [sample(t, device="gpu1", energy_j=100.0 * t) for t in range(10)]
    f = figures(old + new + gpus + gone, 12, 20)
    assert [d.device for d in f.devices] == ["gpu0", "gpu1", "pid:2"]
    assert f.devices[1].samples == 0 and f.energy_j is None  # not a GPU that drew nothing
    assert f.devices[2].rss_peak_bytes == 2 << 30


def test_mixed_energy_sources_are_named_so() -> None:
    counter = [sample(t, device="gpu0", energy_j=300.0 * t) for t in range(11)]
    power = [sample(t, device="gpu1", power_w=200.0) for t in range(11)]
    f = figures(counter + power, 0, 10)
    assert f.energy_source == "mixed" and f.energy_j == pytest.approx(5000.0)


@dataclass(frozen=True)
class Step:
    start_ns: int
    end_ns: int
    tokens: int


def test_training_energy_per_step_and_per_token() -> None:
    series = [sample(t, energy_j=250.0 * t) for t in range(13)]  # 250 W
    steps = [Step((1 + 2 * i) * S, (3 + 2 * i) * S, 4096) for i in range(5)]  # 1 s -> 11 s
    f = training_figures(series, steps)
    assert isinstance(f, AcceleratorFigures)
    assert (f.start_ns, f.end_ns, f.steps, f.tokens) == (1 * S, 11 * S, 5, 5 * 4096)
    assert f.energy_j == pytest.approx(2500.0) and f.energy_per_step_j == pytest.approx(500.0)
    assert f.energy_per_token_j == pytest.approx(2500.0 / (5 * 4096))
    assert training_figures(series, []) == Unavailable("no training step")


def test_span_needs_two_readings_inside() -> None:
    assert span([(0, 1.0), (10, 1.0)], 5, 10) is None
    sp = span([(0, 0.0), (10, 10.0), (20, 20.0)], 5, 15)
    assert sp is None  # one reading inside [5, 15)
    sp = span([(0, 0.0), (10, 10.0), (12, 12.0), (20, 20.0)], 5, 15)
    assert sp is not None and sp.points == ((5, 5.0), (10, 10.0), (12, 12.0), (15, 15.0))


# A piecewise-constant power: each segment read at its start and its end with its own value
# (two reads at each change), so the trapezoid of the reads is exact; the window's edges fall
# anywhere, inside a segment or on a change.
segments = st.lists(
    st.tuples(st.integers(1, 5 * S), st.floats(0, 1000, allow_nan=False)), min_size=1, max_size=12
)


@given(segments, st.floats(0, 1), st.floats(0, 1))
def test_the_integral_of_piecewise_constant_power_is_exact(
    parts: list[tuple[int, float]], a: float, b: float
) -> None:
    reads, t = [], 0
    for length, watts in parts:
        reads += [sample(0, power_w=watts), sample(0, power_w=watts)]
        reads[-2] = dataclasses.replace(reads[-2], t_ns=t)
        reads[-1] = dataclasses.replace(reads[-1], t_ns=t + length)
        t += length
    lo, hi = sorted((round(a * t), round(b * t)))
    exact, start = 0.0, 0
    for length, watts in parts:
        overlap = min(hi, start + length) - max(lo, start)
        exact += watts * max(0, overlap) / S
        start += length
    result = accelerator_figures(reads, lo, hi)
    inside = [r for r in reads if lo <= r.t_ns < hi]
    if len(inside) < 2:
        energy = None if isinstance(result, Unavailable) else result.energy_j
        assert energy is None
        return
    assert isinstance(result, AcceleratorFigures)
    assert result.energy_j is not None
    assert math.isclose(result.energy_j, exact, rel_tol=1e-9, abs_tol=1e-6)


def test_trapezoid_of_a_triangle() -> None:
    assert trapezoid([(0, 0.0), (S, 10.0), (2 * S, 0.0)]) == pytest.approx(10.0)
