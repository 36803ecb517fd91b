"""The report's accelerator section: figures per level and device, the chart, the sources."""

from __future__ import annotations

import dataclasses

import pytest

from moeperf.collectors.accel_figures import accelerator_figures
from moeperf.collectors.accel_records import AcceleratorFigures, DeviceSample, SamplerCost
from moeperf.collectors.serving_records import empty_scenario
from moeperf.collectors.telemetry_records import SourceStatus, TelemetrySummary
from moeperf.reports.accel_blocks import accelerator_blocks
from moeperf.reports.figures.accelerators import accelerator_chart, level_spans
from moeperf.reports.render import Chart, Table

S = 1_000_000_000


def sample(t_s: float, scenario: str, **fields) -> DeviceSample:
    base = dict(
        t_ns=int(t_s * S), source="dcgm", device="node1:gpu0", name="NVIDIA H200",
        host="node1", utilization_ratio=0.5, memory_used_bytes=60 * 2**30,
        memory_total_bytes=141 * 2**30, power_w=400.0, scenario=scenario,
    )  # fmt: skip
    base.update(fields)
    return DeviceSample(**base)  # type: ignore[arg-type]


def run_samples() -> list[DeviceSample]:
    # Level c=1 over 0-10 s at 200 W, c=8 over 10-20 s at 600 W (the counter climbs with it);
    # the target's process beside them.
    samples = []
    energy_j = 5000.0
    for t in range(0, 21):
        scenario = "c=1" if t < 10 else "c=8"
        power_w = 200.0 if t < 10 else 600.0
        samples.append(sample(t, scenario, power_w=power_w, energy_j=energy_j))
        energy_j += 200.0 if t < 9 else 600.0 if t >= 10 else 400.0
        samples.append(
            sample(t, scenario, source="process", device="pid:77", name=None, host="h",
                   utilization_ratio=None, memory_used_bytes=None, memory_total_bytes=None,
                   power_w=None, rss_bytes=(500 + t) * 2**20, cpu_ratio=0.8)
        )  # fmt: skip
    return samples


def telemetry(**overrides) -> TelemetrySummary:
    cost = SamplerCost(
        period_s=0.1, run_s=21.0, reads=210, ticks_missed=2, read_mean_s=0.0012,
        read_max_s=0.004, cpu_s=0.2, cpu_ratio=0.0095, errors=(),
    )  # fmt: skip
    base = dict(
        period_s=0.1,
        sources=(
            SourceStatus("nvml", unavailable="NVML: NVML Shared Library Not Found"),
            SourceStatus("dcgm", name="dcgm http://node1:9400/metrics"),
            SourceStatus("process", name="process 77"),
        ),
        samples=42,
        cost=cost,
    )
    base.update(overrides)
    return TelemetrySummary(**base)  # type: ignore[arg-type]


def scenarios(samples):
    out = {}
    for name, (start, end, tokens) in {"c=1": (1, 9, 1000), "c=8": (11, 19, 4000)}.items():
        figures = accelerator_figures(samples, start * S, end * S, tokens=tokens, requests=10)
        assert isinstance(figures, AcceleratorFigures)
        out[name] = dataclasses.replace(empty_scenario(), accelerator=figures)
    return out


def test_the_figures_table_has_each_device_and_the_energy_per_token_of_each_level():
    samples = run_samples()
    by_level = {name: entry.accelerator for name, entry in scenarios(samples).items()}
    blocks = accelerator_blocks(telemetry(), by_level, samples)
    table = blocks[0]
    assert isinstance(table, Table)
    frame = table.frame
    totals = frame[frame["device"] == "all accelerators"].set_index("level")
    # The counter climbs 200 J/s over c=1's 8 s and 600 J/s over c=8's: from the counter.
    assert totals.loc["c=1", "energy J"] == pytest.approx(1600)
    assert totals.loc["c=1", "J / token"] == pytest.approx(1.6)
    assert totals.loc["c=8", "J / token"] == pytest.approx(4800 / 4000)
    assert totals.loc["c=8", "tokens / J"] == pytest.approx(4000 / 4800)
    assert set(totals["energy from"]) == {"counter"}
    assert "J / step" not in frame  # a serving run has no steps
    process = frame[frame["device"] == "process h pid:77"].set_index("level")
    # The largest reading in [11 s, 19 s): the one at 18 s.
    assert process.loc["c=8", "RSS peak MiB"] == pytest.approx(518)
    assert process.loc["c=8", "CPU mean %"] == pytest.approx(80)
    # What was not available, and why, is in the caption; so is every source read.
    assert "nvml: NVML: NVML Shared Library Not Found" in table.caption
    assert "dcgm http://node1:9400/metrics" in table.caption
    chart = blocks[1]
    assert isinstance(chart, Chart)
    assert "210 reads every 100 ms" in chart.caption and "0.95% of a core" in chart.caption


def test_the_chart_draws_each_device_and_shades_each_level():
    samples = run_samples()
    assert level_spans(samples) == [("c=1", 0.0, 9.0), ("c=8", 10.0, 20.0)]
    figure = accelerator_chart(samples)
    names = [trace.name for trace in figure.data]
    assert "dcgm node1 node1:gpu0 (NVIDIA H200): power W" in names
    assert "process h pid:77: RSS MiB" in names
    # The process source has no utilisation: no line at 0 for it.
    assert not any(n.startswith("process") and "utilisation" in n for n in names)
    # One band per level, drawn across every panel (3: the GPU's two, the process's one).
    x0 = [shape.x0 for shape in figure.layout.shapes]
    assert sorted(set(x0)) == [0.0, 10.0] and len(x0) == 6


def test_without_any_figure_the_section_says_not_available_and_why():
    status = (SourceStatus("nvml", unavailable="NVML: NVML Shared Library Not Found"),)
    blocks = accelerator_blocks(telemetry(sources=status, cost=None), {}, [])
    table = blocks[0]
    assert isinstance(table, Table)
    assert list(table.frame["accelerator figures"]) == ["not available"]
    assert "Sources read: none" in table.caption
    assert "NVML Shared Library Not Found" in table.caption
    assert "the sampler did not run" in blocks[1].caption


def test_a_process_only_run_has_no_accelerator_totals():
    samples = [s for s in run_samples() if s.source == "process"]
    figures = accelerator_figures(samples, 1 * S, 9 * S, tokens=1000, requests=10)
    assert isinstance(figures, AcceleratorFigures)
    table = accelerator_blocks(telemetry(), {"c=1": figures}, samples)[0]
    assert isinstance(table, Table)
    assert list(table.frame["device"]) == ["process h pid:77"]
    assert "energy J" not in table.frame  # no device has power: no empty energy column
