"""[telemetry] of a serving spec: defaults, the dcgm_url rule, bad sources named with the valid
choices (exit 2 from the CLI); the summary's new records round-trip through summary.json and
older summaries without them still read; a host without NVML gets "not available"."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from moeperf.cli import main
from moeperf.collectors.accel_records import (
    AcceleratorFigures,
    DeviceFigures,
    SamplerCost,
    SourceErrors,
    Unavailable,
)
from moeperf.collectors.serving_records import ServingSummary, empty_scenario
from moeperf.collectors.sources.nvml_source import open_nvml
from moeperf.collectors.store import RunStore
from moeperf.collectors.summary_json import summary_from_json, summary_to_json
from moeperf.collectors.telemetry_records import SourceStatus, TelemetrySummary
from moeperf.reports.terminal.telemetry_tables import telemetry_lines
from moeperf.specs import validate_spec
from moeperf.suites.errors import SpecError
from moeperf.suites.serving.spec import ServingSpec
from moeperf.suites.serving.telemetry import with_figures
from moeperf.suites.telemetry import NOT_STARTED_BY_US, Telemetry
from moeperf.suites.telemetry_spec import TelemetrySpec


def serving(telemetry: dict[str, Any]) -> ServingSpec:
    return validate_spec({"name": "t", "telemetry": telemetry}, "spec.toml").serving


def test_defaults() -> None:
    spec = ServingSpec(name="t").telemetry
    assert spec == TelemetrySpec(enabled=True, sources=("nvml", "process"), period_s=0.1)
    assert spec.dcgm_url is None


def test_dcgm_needs_its_url_and_a_url_needs_dcgm() -> None:
    with pytest.raises(SpecError, match=r"telemetry.sources has 'dcgm': give telemetry.dcgm_url"):
        serving({"sources": ["dcgm"]})
    with pytest.raises(SpecError, match=r"telemetry.dcgm_url is set but .* no 'dcgm'"):
        serving({"dcgm_url": "http://node1:9400"})
    with pytest.raises(SpecError, match=r"telemetry.dcgm_url: 'node1:9400' is not an http"):
        serving({"sources": ["dcgm"], "dcgm_url": "node1:9400"})
    ok = serving({"sources": ["dcgm"], "dcgm_url": "http://node1:9400/metrics"}).telemetry
    assert ok.sources == ("dcgm",)


def test_bad_source_and_period_name_the_field_and_the_valid_choices() -> None:
    with pytest.raises(SpecError) as info:
        serving({"sources": ["nvml", "gpu"]})
    message = str(info.value)
    assert "telemetry.sources.1" in message
    assert "'nvml', 'dcgm' or 'process'" in message and "'gpu'" in message
    with pytest.raises(SpecError, match=r"telemetry.period_s: .*greater than or equal to 0.01"):
        serving({"period_s": 0.001})
    with pytest.raises(SpecError, match=r"telemetry.period_s: .*less than or equal to 60"):
        serving({"period_s": 61})
    with pytest.raises(SpecError, match=r"lists process more than once"):
        serving({"sources": ["process", "process"]})
    with pytest.raises(SpecError, match=r"telemetry.interval_s: unknown field"):
        serving({"interval_s": 1})


def test_a_bad_telemetry_table_is_exit_2(tmp_path, capsys) -> None:
    path = tmp_path / "spec.toml"
    path.write_text('name = "t"\n[telemetry]\nsources = ["dcgm"]\n')
    assert main(["--runs-dir", str(tmp_path / "runs"), "run", str(path)]) == 2
    assert "telemetry.dcgm_url" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


COST = SamplerCost(
    period_s=0.1,
    run_s=4.0,
    reads=40,
    ticks_missed=1,
    read_mean_s=0.002,
    read_max_s=0.011,
    cpu_s=0.05,
    cpu_ratio=0.0125,
    errors=(SourceErrors("dcgm http://h:9400/metrics", 2, "ScrapeError: HTTP 503"),),
)
GPU = DeviceFigures(
    source="dcgm",
    host="h",
    device="h:gpu0",
    name="NVIDIA H200",
    samples=15,
    covered_s=1.5,
    utilization_mean_ratio=0.9,
    utilization_max_ratio=0.97,
    memory_peak_bytes=132_398 * 2**20,
    memory_peak_ratio=0.92,
    power_mean_w=612.5,
    energy_j=900.0,
    energy_source="counter",
)
FIGURES = AcceleratorFigures(
    start_ns=1_000,
    end_ns=1_500_001_000,
    devices=(
        GPU,
        dataclasses.replace(
            GPU, source="process", device="pid:7", rss_peak_bytes=300 * 2**20, cpu_mean_ratio=1.5
        ),
    ),
    power_mean_w=612.5,
    energy_j=900.0,
    energy_source="counter",
    tokens=450,
    requests=30,
    steps=None,
    energy_per_token_j=2.0,
    energy_per_request_j=30.0,
    energy_per_step_j=None,
    tokens_per_j=0.5,
)
TELEMETRY = TelemetrySummary(
    period_s=0.1,
    sources=(
        SourceStatus("nvml", unavailable="NVML: nvidia-ml-py is not installed"),
        SourceStatus("dcgm", name="dcgm http://h:9400/metrics"),
    ),
    samples=80,
    cost=COST,
)


def test_the_new_records_round_trip_through_summary_json() -> None:
    summary = ServingSummary(
        scenarios={"c=4": dataclasses.replace(empty_scenario(), accelerator=FIGURES)},
        telemetry=TELEMETRY,
    )
    assert summary_from_json(summary_to_json(summary), "summary.json") == summary


def test_a_summary_written_before_telemetry_still_reads() -> None:
    body = summary_to_json(ServingSummary(scenarios={"c=1": empty_scenario()}))
    del body["telemetry"]
    del body["scenarios"]["c=1"]["accelerator"]
    read = summary_from_json(body, "summary.json")
    assert isinstance(read, ServingSummary)
    assert read.telemetry is None and read.scenarios["c=1"].accelerator is None


def test_the_tables_show_figures_cost_and_what_was_not_available() -> None:
    scenarios = {
        "c=4": dataclasses.replace(empty_scenario(), accelerator=FIGURES),
        "c=8": empty_scenario(),
    }
    shown = telemetry_lines(TELEMETRY, {n: e.accelerator for n, e in scenarios.items()})
    assert shown.unavailable == (
        "c=8 accelerators: not available: no sample in its measured window",
    )
    text = [i for i in shown.detail if isinstance(i, str)]
    # The target's process is a line of its own, not a row of empty GPU columns.
    assert (
        "c=4: target process pid:7 over 1.50 s: RSS peak 300.0 MiB, CPU mean 150.0% of a core"
        in text
    )
    (table,) = [i for i in shown.detail if not isinstance(i, str)]
    assert table.row_count == 2  # the GPU and the accelerators' total
    assert "telemetry nvml: not available: NVML: nvidia-ml-py is not installed" in text
    assert text[-1].startswith("sampler: 40 reads every 0.1 s over 4.0 s; read mean 2.00 ms")
    assert "1 ticks missed; 2 failed reads of dcgm http://h:9400/metrics" in text[-1]
    none = dataclasses.replace(TELEMETRY, samples=0, cost=None)
    # A sampler that read nothing: the run's telemetry note says why; the levels' lines
    # say it once, as detail.
    quiet = telemetry_lines(none, {"c=1": None, "c=2": None})
    assert quiet.unavailable == ()
    said = "accelerators: not available: nvml: NVML: nvidia-ml-py is not installed"
    assert quiet.detail.count(said) == 1  # not once per level
    assert quiet.detail[-1] == "sampler: not run (no source available)"


def test_no_nvml_and_no_process_of_ours_are_notes_not_crashes(tmp_path) -> None:
    nvml = open_nvml()
    if not isinstance(nvml, Unavailable):
        nvml.close()
        pytest.skip("this host has NVML and a GPU")
    run = RunStore(tmp_path / "runs").create("serving")
    with run:
        telemetry = Telemetry(TelemetrySpec(), None, run)  # a url target: no process of ours
        telemetry.start()
        telemetry.level_started("c=1")
        telemetry.level_ended()
        telemetry.finish()
        scenarios, summary = with_figures(telemetry, {}, run.requests_frame())
    assert scenarios == {}
    assert summary == TelemetrySummary(
        period_s=0.1,
        sources=(
            SourceStatus("nvml", unavailable=nvml.reason),
            SourceStatus("process", unavailable=NOT_STARTED_BY_US),
        ),
        samples=0,
        cost=None,
    )
    assert nvml.reason.startswith("NVML: ")
    (note,) = [n for n in run.manifest.notes if n.startswith("Telemetry:")]
    assert note == (
        f"Telemetry: every 0.1 s from no source. nvml not available ({nvml.reason}); "
        f"process not available ({NOT_STARTED_BY_US})."
    )
