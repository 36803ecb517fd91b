"""[telemetry] in a serving run: the embedded synthetic target's process tree and a DCGM
exporter (the recorded page over loopback, its energy counters rising at a known rate)
sampled beside one level; the samples stored with the level's label, the level's figures
over its measured window in the summary, and `moeperf runs show` printing them."""

from __future__ import annotations

import pytest
from dcgm_standin import RISE_W, counter_at, rising_exporter, stamp_lag_s
from loopback import serving_in_thread

from moeperf.cli import main
from moeperf.collectors.serving_records import ServingSummary
from moeperf.collectors.store import RunStore
from moeperf.suites.serving.runner import run_serving
from moeperf.suites.serving.spec import ServingSpec

pytestmark = pytest.mark.slow


def test_a_level_gets_process_and_dcgm_figures_over_its_measured_window(tmp_path, capsys):
    store = RunStore(tmp_path / "runs")
    served_ns: list[int] = []
    with serving_in_thread({}, {"/metrics": rising_exporter(served_ns)}) as url:
        spec = ServingSpec.model_validate(
            {
                "name": "telemetry",
                "workload": {"input_tokens": {"mean": 16}, "output_tokens": {"mean": 12}},
                "load": {"levels": [4], "duration_s": 2.0, "warmup_s": 0.5, "cooldown_s": 0.0},
                "telemetry": {"sources": ["process", "dcgm"], "dcgm_url": url},
            }
        )
        run_id = run_serving(spec, spec.model_dump(mode="json"), store)
    reader = store.open(run_id)
    summary = reader.summary()
    assert isinstance(summary, ServingSummary)
    samples = reader.accelerator_samples()
    entry = summary.scenarios["c=4"]
    requests = reader.requests()

    # Stored: both sources, labelled with the level while it ran ("" around it).
    labelled = [s for s in samples if s.scenario == "c=4"]
    assert {s.source for s in labelled} == {"process", "dcgm"}
    assert {s.device for s in labelled if s.source == "dcgm"} == {
        "gpu-node-7:gpu0",
        "gpu-node-7:gpu1",
    }
    assert all(s.rss_bytes and s.rss_bytes > 0 for s in samples if s.source == "process")
    assert "" in {s.scenario for s in samples}  # read before the level's start too

    # The level's window is its throughput's: first measured send to last completion.
    measured = requests[(requests["scenario"] == "c=4") & (requests["phase"] == "measure")]
    figures = entry.accelerator
    assert figures is not None
    start_ns, end_ns = int(measured["send_ns"].min()), int(measured["done_ns"].max())
    assert (figures.start_ns, figures.end_ns) == (start_ns, end_ns)
    assert (end_ns - start_ns) / 1e9 == pytest.approx(entry.window_s)
    assert figures.tokens == int(entry.output_tokens) > 0 and figures.requests == entry.ok

    # Energy from the counters: each GPU's counter at the window's edges, by hand.
    lag_s = stamp_lag_s(samples, served_ns, reader.manifest.anchor_monotonic_ns)
    by_device = {d.device: d for d in figures.devices}
    expected_total = 0.0
    for device in ("gpu-node-7:gpu0", "gpu-node-7:gpu1"):
        series = [s for s in samples if s.device == device]
        expected = counter_at(series, end_ns) - counter_at(series, start_ns)
        got = by_device[device]
        assert got.energy_source == "counter"
        assert got.energy_j == pytest.approx(expected, rel=1e-9)
        # ... which is the rate the exporter was given, over the window (give or take the
        # time between the sampler's stamp and the exporter's answer, at either edge).
        assert got.energy_j is not None
        assert abs(got.energy_j - RISE_W * entry.window_s) <= RISE_W * lag_s + 1e-2
        assert got.power_mean_w == pytest.approx({"gpu-node-7:gpu0": 612.345}.get(device, 487.12))
        assert got.utilization_max_ratio == {"gpu-node-7:gpu0": 0.97}.get(device, 0.84)
        expected_total += expected
    assert figures.energy_source == "counter"
    assert figures.energy_j == pytest.approx(expected_total, rel=1e-9)
    assert figures.energy_per_token_j == pytest.approx(expected_total / figures.tokens)
    assert figures.tokens_per_j == pytest.approx(figures.tokens / expected_total)
    process = next(d for d in figures.devices if d.source == "process")
    assert process.rss_peak_bytes and process.rss_peak_bytes > 0 and process.energy_j is None

    # The run's telemetry: both sources on, the sampler's cost measured.
    telemetry = summary.telemetry
    assert telemetry is not None and telemetry.period_s == 0.1
    assert [(s.source, s.unavailable) for s in telemetry.sources] == [
        ("process", None),
        ("dcgm", None),
    ]
    assert telemetry.samples == len(samples)
    cost = telemetry.cost
    assert cost is not None and cost.reads >= 20 and cost.errors == ()
    assert cost.read_mean_s is not None and cost.cpu_ratio is not None
    # Every tick on the grid was read or counted as missed (a read that overran its period).
    assert abs(cost.reads + cost.ticks_missed - cost.run_s / cost.period_s) <= 2
    # The whole run (one level): the same window and figures as the level's.
    assert telemetry.run is not None
    assert (telemetry.run.start_ns, telemetry.run.end_ns) == (start_ns, end_ns)
    assert telemetry.run.energy_j == pytest.approx(expected_total, rel=1e-9)
    note = next(n for n in reader.manifest.notes if n.startswith("Telemetry:"))
    assert "every 0.1 s from process, dcgm " + url in note
    capsys.readouterr()

    # The whole run's accelerators are the answer; each level's and the sampler's cost
    # are detail (--verbose).
    assert main(["--runs-dir", str(tmp_path / "runs"), "runs", "show", run_id]) == 0
    shown = capsys.readouterr().out
    assert "whole run: accelerators over its" in shown
    assert "c=4: accelerators over the measured" not in shown
    assert main(["--runs-dir", str(tmp_path / "runs"), "runs", "show", run_id, "-v"]) == 0
    shown = capsys.readouterr().out
    assert "c=4: accelerators over the measured" in shown
    assert "dcgm gpu-node-7:gpu0" in shown and "(counter)" in shown
    assert "all accelerators" in shown and "J/token" in shown
    assert f"sampler: {cost.reads} reads every 0.1 s" in shown
    assert "whole run: accelerators over its" in shown


def test_a_url_target_has_no_process_source(tmp_path):
    from moeperf.suites.serving.embedded.process import running_target

    store = RunStore(tmp_path / "runs")
    with running_target("moeperf.targets.synthetic", {"ttft_s": 0.01, "itl_s": 0.002}) as url:
        spec = ServingSpec.model_validate(
            {
                "name": "telemetry-url",
                "target": {"kind": "url", "url": url},
                "workload": {"input_tokens": {"mean": 16}, "output_tokens": {"mean": 8}},
                "load": {"levels": [2], "duration_s": 1.0, "warmup_s": 0.0, "cooldown_s": 0.0},
                "telemetry": {"sources": ["process"]},
            }
        )
        run_id = run_serving(spec, spec.model_dump(mode="json"), store)
    reader = store.open(run_id)
    summary = reader.summary()
    assert isinstance(summary, ServingSummary)
    assert reader.accelerator_samples() == []
    assert summary.scenarios["c=2"].accelerator is None
    telemetry = summary.telemetry
    assert telemetry is not None and telemetry.cost is None
    (status,) = telemetry.sources
    assert status.unavailable == "the target is not a process this harness started"
    assert any("process not available (the target is not" in n for n in reader.manifest.notes)
