"""DeviceSampler: samples stored as read and labelled by level, a failing source counted and
the others read on, ticks on a fixed grid with the missed ones skipped, its cost measured."""

from __future__ import annotations

import time
from collections.abc import Sequence

import pytest

from moeperf.collectors.accel_records import DeviceSample
from moeperf.collectors.sources.accel_sampler import DeviceSampler, next_tick


def reading(t_ns: int, scenario: str, device: str = "gpu0") -> DeviceSample:
    return DeviceSample(
        t_ns=t_ns, source="nvml", device=device, name=None, host="h", utilization_ratio=0.5,
        memory_used_bytes=None, memory_total_bytes=None, power_w=100.0, energy_j=None,
        sm_clock_hz=None, memory_clock_hz=None, temperature_c=None, throttle_reasons=None,
        cpu_ratio=None, rss_bytes=None, scenario=scenario,
    )  # fmt: skip


class FakeSource:
    """Two GPUs; ``fail_on`` reads raise, ``read_s`` makes each read take that long."""

    def __init__(self, name: str = "fake", fail_on: Sequence[int] = (), read_s: float = 0.0):
        self.name = name
        self.reads = 0
        self._fail_on = set(fail_on)
        self._read_s = read_s

    def read(self, t_ns: int, scenario: str) -> list[DeviceSample]:
        self.reads += 1
        if self._read_s:
            time.sleep(self._read_s)
        if self.reads in self._fail_on:
            raise ConnectionError(f"read {self.reads} failed")
        return [reading(t_ns, scenario, "gpu0"), reading(t_ns, scenario, "gpu1")]

    def close(self) -> None:
        pass


class FakeClock:
    def __init__(self, now_ns: int):
        self.now_ns = now_ns

    def __call__(self) -> int:
        return self.now_ns


def test_next_tick_keeps_the_grid_and_skips_ticks_that_passed() -> None:
    period = 100
    assert next_tick(1000, period, 0, 1030) == (1, 0)  # read took 30: wait for tick 1
    assert next_tick(1000, period, 1, 1100) == (2, 0)  # exactly on time: no skip
    assert next_tick(1000, period, 1, 1250) == (3, 1)  # tick 2 (1200) passed: skipped
    assert next_tick(1000, period, 3, 1980) == (10, 6)  # ticks 4..9 passed


def test_samples_are_stored_as_read_on_the_run_clock_with_the_level() -> None:
    clock = FakeClock(5_000)
    stored: list[DeviceSample] = []
    sampler = DeviceSampler([FakeSource()], anchor_ns=1_000, store=stored.append, clock_ns=clock)
    sampler.read_once()
    sampler.set_scenario("c=8")
    clock.now_ns = 7_000
    assert sampler.read_once() == 2
    assert [(s.t_ns, s.device, s.scenario) for s in stored] == [
        (4_000, "gpu0", ""),
        (4_000, "gpu1", ""),
        (6_000, "gpu0", "c=8"),
        (6_000, "gpu1", "c=8"),
    ]


def test_a_failing_source_is_counted_and_the_others_are_read() -> None:
    stored: list[DeviceSample] = []
    bad, good = FakeSource("dcgm http://n1:9400/metrics", fail_on=(1, 3)), FakeSource("nvml")
    sampler = DeviceSampler([bad, good], anchor_ns=0, store=stored.append)
    for _ in range(3):
        sampler.read_once()
    assert len(stored) == 2 * 4  # good 3 times, bad once
    (errors,) = sampler.cost().errors
    assert errors.source == "dcgm http://n1:9400/metrics" and errors.count == 2
    assert errors.last == "ConnectionError: read 3 failed"


def test_a_failing_store_is_counted_not_raised() -> None:
    def full_disk(sample: DeviceSample) -> None:
        raise OSError(28, "No space left on device")

    sampler = DeviceSampler([FakeSource()], anchor_ns=0, store=full_disk)
    assert sampler.read_once() == 0
    (errors,) = sampler.cost().errors
    assert errors.source == "store" and errors.count == 2


@pytest.mark.timing
def test_a_running_sampler_reads_every_period_and_measures_itself() -> None:
    stored: list[DeviceSample] = []
    sampler = DeviceSampler(
        [FakeSource()], anchor_ns=time.monotonic_ns(), store=stored.append, period_s=0.02
    )
    sampler.start()
    time.sleep(0.1)
    sampler.set_scenario("c=1")
    time.sleep(0.2)
    cost = sampler.finish()
    assert sampler.cost() == cost  # stopped: the cost no longer moves
    assert cost.period_s == 0.02 and cost.run_s >= 0.3
    # A tick every 20 ms of the run (16 in 0.3 s), and the read at the finish: a loaded
    # machine may skip some, and no tick is read twice or made up.
    assert cost.reads >= 3 and cost.reads + cost.ticks_missed <= cost.run_s / 0.02 + 2
    assert len(stored) == 2 * cost.reads
    assert {s.scenario for s in stored} == {"", "c=1"}
    assert cost.read_mean_s is not None and cost.read_max_s is not None
    assert 0 < cost.read_mean_s <= cost.read_max_s < 0.3
    assert cost.cpu_ratio is not None and 0 <= cost.cpu_ratio < 1
    assert cost.errors == ()


@pytest.mark.timing
def test_reads_longer_than_the_period_skip_ticks_and_count_them() -> None:
    stored: list[DeviceSample] = []
    slow = FakeSource(read_s=0.05)  # each read spans 2.5 periods of 20 ms
    sampler = DeviceSampler([slow], anchor_ns=0, store=stored.append, period_s=0.02)
    sampler.start()
    time.sleep(0.3)
    cost = sampler.finish()
    assert cost.reads >= 2
    # Every read but the last overran 2 ticks (or more on a loaded machine); none is made up.
    assert cost.ticks_missed >= 2 * (cost.reads - 1)
    assert cost.read_max_s is not None and cost.read_max_s >= 0.05


def test_a_sampler_that_never_ran_costs_nothing() -> None:
    cost = DeviceSampler([FakeSource()], anchor_ns=0, store=lambda s: None).finish()
    assert cost.reads == 0 and cost.read_mean_s is None and cost.cpu_ratio is None


def test_period_must_be_positive() -> None:
    with pytest.raises(ValueError, match="period_s"):
        DeviceSampler([], anchor_ns=0, store=lambda s: None, period_s=0)


def test_the_finish_reads_once_more_after_the_last_tick() -> None:
    # A window that ends between two ticks needs a reading after it (accel_figures
    # interpolates its edge there): the finish reads once more, whatever the period.
    stored: list[DeviceSample] = []
    anchor_ns = time.monotonic_ns()
    sampler = DeviceSampler([FakeSource()], anchor_ns=anchor_ns, store=stored.append, period_s=60)
    sampler.start()
    while not stored:  # the tick at the start
        time.sleep(0.01)
    sampler.set_scenario("c=1")
    ended_ns = time.monotonic_ns() - anchor_ns
    cost = sampler.finish()
    assert cost.reads == 2 and [s.scenario for s in stored] == ["", "", "c=1", "c=1"]
    assert stored[-1].t_ns >= ended_ns
