"""[telemetry] in a training run: the trainer's own process tree and a DCGM exporter (the
recorded page over loopback, its energy counters rising at a known rate) sampled beside two
scenarios run one after the other; each scenario's energy per step and per token over its
steps' span, from the counters, checked by hand; interleaved scenarios get none."""

from __future__ import annotations

import pytest
from dcgm_standin import DEVICES, RISE_W, counter_at, rising_exporter, stamp_lag_s
from loopback import serving_in_thread

from moeperf.cli import main
from moeperf.collectors.store import RunStore
from moeperf.collectors.training_summary import TrainingSummary
from moeperf.suites.training.runner import run_training
from moeperf.suites.training.spec import TrainingSpec
from moeperf.suites.training.telemetry import INTERLEAVED

pytestmark = pytest.mark.slow


def spec(dcgm_url: str, order: str = "sequential", steps: int = 12) -> TrainingSpec:
    return TrainingSpec.model_validate(
        {
            "name": "tiny-telemetry",
            "kind": "mfu",
            "peak_flops_per_s": 1e11,  # given: no matmul benchmark before the steps
            "trainer": {
                "init_from": "none",
                "mtp": False,
                "seq_len": 32,
                "micro_batch_size": 2,
                "microbatches": 1,
                "steps": steps,
                "threads": 1,
                "model": {"hidden_size": 32, "num_heads": 2, "num_kv_heads": 1},
            },
            "matrix": {"policies": ["keep-all"], "skews": ["calm", "spiky"], "order": order},
            "telemetry": {"sources": ["process", "dcgm"], "dcgm_url": dcgm_url, "period_s": 0.02},
        }
    )


def test_each_scenario_gets_its_energy_per_step_and_per_token(tmp_path, capsys):
    store = RunStore(tmp_path / "runs")
    served_ns: list[int] = []
    with serving_in_thread({}, {"/metrics": rising_exporter(served_ns)}) as url:
        training = spec(url)
        run_id = run_training(training, training.model_dump(mode="json"), store)
    reader = store.open(run_id)
    summary = reader.summary()
    assert isinstance(summary, TrainingSummary)
    samples = reader.accelerator_samples()
    steps = reader.steps()
    assert {s.scenario for s in samples} >= {"keep-all/calm", "keep-all/spiky"}
    for name, entry in summary.scenarios.items():
        figures = entry.accelerator
        assert figures is not None, name
        mine = steps[(steps["scenario"] == name) & steps["microbatch"].isna()]
        replayed = mine["events"].map(lambda ev: any(e.get("kind") == "replay" for e in ev))
        mine = mine[~replayed.astype(bool)]
        start_ns, end_ns = int(mine["start_ns"].min()), int(mine["end_ns"].max())
        assert (figures.start_ns, figures.end_ns) == (start_ns, end_ns)
        assert figures.steps == entry.steps == len(mine)
        assert figures.tokens == entry.tokens
        expected = sum(
            counter_at([s for s in samples if s.device == d], end_ns)
            - counter_at([s for s in samples if s.device == d], start_ns)
            for d in DEVICES
        )
        assert figures.energy_source == "counter"
        assert figures.energy_j == pytest.approx(expected, rel=1e-9)
        # ... the exporter's rate over the span, give or take the time between a reading's
        # stamp and the exporter's answer, at either edge: measured, as the exporter's
        # thread shares a busy host (and the GIL) with the trainer (0.4 s in one CI run).
        span_s = (end_ns - start_ns) / 1e9
        rate_w = len(DEVICES) * RISE_W
        lag_s = stamp_lag_s(samples, served_ns, reader.manifest.anchor_monotonic_ns)
        assert figures.energy_j is not None
        assert abs(figures.energy_j - rate_w * span_s) <= rate_w * lag_s + 1e-2
        assert figures.energy_per_step_j == pytest.approx(expected / entry.steps)
        assert figures.energy_per_token_j == pytest.approx(expected / entry.tokens)
        process = next(d for d in figures.devices if d.source == "process")
        assert process.rss_peak_bytes and process.rss_peak_bytes > 0
    telemetry = summary.telemetry
    assert telemetry is not None and telemetry.cost is not None and telemetry.cost.reads > 0
    # The whole run: both scenarios' steps, end to end.
    whole = telemetry.run
    assert whole is not None
    assert whole.steps == sum(e.steps for e in summary.scenarios.values())
    assert whole.start_ns == min(
        e.accelerator.start_ns for e in summary.scenarios.values() if e.accelerator
    )
    capsys.readouterr()
    # Each scenario's accelerators: detail, printed with --verbose.
    assert main(["--runs-dir", str(tmp_path / "runs"), "runs", "show", run_id, "-v"]) == 0
    shown = capsys.readouterr().out
    assert "keep-all/calm: accelerators over its steps'" in shown
    assert "J/step" in shown and "(counter)" in shown


def test_interleaved_scenarios_get_no_figures_and_say_why(tmp_path):
    store = RunStore(tmp_path / "runs")
    with serving_in_thread({}, {"/metrics": rising_exporter()}) as url:
        # 4 steps a scenario, not 12: this run's facts are counts and sources (no scenario
        # gets figures; the run's span, ~1 s here, still holds dozens of 0.02 s samples).
        training = spec(url, order="interleaved", steps=4)
        run_id = run_training(training, training.model_dump(mode="json"), store)
    reader = store.open(run_id)
    summary = reader.summary()
    assert isinstance(summary, TrainingSummary)
    assert all(entry.accelerator is None for entry in summary.scenarios.values())
    # The run as a whole has its figures: every step of both scenarios.
    assert summary.telemetry is not None and summary.telemetry.run is not None
    assert summary.telemetry.run.energy_source == "counter"
    assert summary.telemetry.run.steps == sum(e.steps for e in summary.scenarios.values())
    assert reader.accelerator_samples()  # stored all the same
    assert INTERLEAVED in reader.manifest.notes
