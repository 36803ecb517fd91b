"""[telemetry] in a training-dist run: a scenario's figures are over its completed job steps
(every rank's last execution of a step), checked against a hand-built energy counter; the
summary, `runs show` and the report carry them (suites/training/telemetry.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from moeperf.cli import main
from moeperf.collectors.accel_records import DeviceSample
from moeperf.collectors.dist_training_summary import (
    DistOutcome,
    DistTrainingSummary,
    job_steps,
    summarize_dist,
)
from moeperf.collectors.records import StepRecord
from moeperf.collectors.store import RunStore
from moeperf.collectors.training_summary import PeakFlopsSummary
from moeperf.reports.render import Chart, Table
from moeperf.reports.report import run_section
from moeperf.reports.runs import load_run
from moeperf.suites.telemetry import Telemetry
from moeperf.suites.telemetry_spec import TelemetrySpec
from moeperf.suites.training.telemetry import with_dist_figures

S = 1_000_000_000
WATTS = 200.0
PP = "pp2/keep-all/calm"


def record(step: int, rank: int, start_s: float, end_s: float, attempt: int = 0) -> StepRecord:
    return StepRecord(
        step=step, rank=rank, start_ns=round(start_s * S), end_ns=round(end_s * S),
        tokens=64 if rank == 1 else 0, scenario=PP, stage=rank, attempt=attempt,
        model_flops=1e9, loss=8.0 - step / 10,
    )  # fmt: skip


def pp2() -> DistOutcome:
    """Two stages (rank 1 the last); step 1 run again after a restart, step 3 reported by
    rank 0 only (the job ended before rank 1 finished it)."""
    outcome = DistOutcome(PP, "pp2", 1, 2, 1, "keep-all", "calm", 4, None)
    outcome.records = [
        record(0, 0, 1.0, 1.8), record(0, 1, 1.1, 2.0),
        record(1, 0, 2.0, 2.9), record(1, 1, 2.1, 3.0),
        record(1, 0, 4.0, 4.9, attempt=1), record(1, 1, 4.1, 5.0, attempt=1),
        record(2, 0, 5.0, 5.9, attempt=1), record(2, 1, 5.1, 6.0, attempt=1),
        record(3, 0, 6.0, 6.9, attempt=1),
    ]  # fmt: skip
    outcome.attempts = 2
    return outcome


def never_completed() -> DistOutcome:
    outcome = DistOutcome("ep2/keep-all/calm", "ep2", 2, 1, 1, "keep-all", "calm", 4, None)
    outcome.records = [record(0, 0, 7.0, 7.5)]  # rank 1 never reported the step
    return outcome


def test_job_steps_take_every_ranks_last_execution_and_the_last_stages_tokens():
    steps = job_steps(pp2())
    assert [(j.step, j.start_ns, j.end_ns, j.tokens) for j in steps] == [
        (0, 1 * S, 2 * S, 64),
        (1, 4 * S, 5 * S, 64),  # the replay, not the first run
        (2, 5 * S, 6 * S, 64),
    ]
    assert job_steps(never_completed()) == []


def counter(t_s: float) -> DeviceSample:
    """A GPU's energy counter rising at WATTS, every half second from 0 s to 10 s."""
    return DeviceSample(
        t_ns=round(t_s * S), source="nvml", device="gpu0", host="h", scenario="",
        energy_j=1000.0 + WATTS * t_s, power_w=WATTS,
    )  # fmt: skip


@pytest.fixture
def stored(tmp_path: Path) -> tuple[Path, str, DistTrainingSummary]:
    store = RunStore(tmp_path / "runs")
    outcomes = [pp2(), never_completed()]
    with store.create("training-dist", spec_given={"name": "dist"}) as run:
        # No process to watch and no sampler: the samples are the hand-built ones.
        telemetry = Telemetry(TelemetrySpec(sources=("process",)), None, run)
        for k in range(21):
            run.append_device_sample(counter(k / 2))
        for outcome in outcomes:
            for r in outcome.records:
                run.append_step(r)
        telemetry.finish()
        peak = PeakFlopsSummary(flops_per_s=1e11, source="given", detail=None)
        summary = with_dist_figures(telemetry, summarize_dist(outcomes, peak, None), outcomes)
        run.write_summary(summary)
    return tmp_path / "runs", run.run_id, summary


def test_a_scenario_gets_the_energy_of_its_job_steps_span(stored):
    _, _, summary = stored
    figures = summary.scenarios[PP].accelerator
    assert figures is not None
    # 1 s (step 0's first rank starts) to 6 s (step 2's last rank ends); step 3 never
    # completed on every rank, so neither its time nor its tokens count.
    assert (figures.start_ns, figures.end_ns) == (1 * S, 6 * S)
    assert (figures.steps, figures.tokens) == (3, 3 * 64)
    assert figures.energy_source == "counter"
    assert figures.energy_j == pytest.approx(WATTS * 5)
    assert figures.energy_per_step_j == pytest.approx(WATTS * 5 / 3)
    assert figures.energy_per_token_j == pytest.approx(WATTS * 5 / (3 * 64))
    assert summary.scenarios["ep2/keep-all/calm"].accelerator is None
    telemetry = summary.telemetry
    assert telemetry is not None and telemetry.samples == 21
    assert telemetry.run is not None and telemetry.run.energy_j == pytest.approx(WATTS * 5)
    (status,) = telemetry.sources
    assert status.unavailable is not None  # the process source: nothing to watch


def test_runs_show_and_the_report_carry_the_figures(stored, capsys):
    runs, run_id, _ = stored
    capsys.readouterr()
    assert main(["--runs-dir", str(runs), "runs", "show", run_id]) == 0
    shown = capsys.readouterr().out
    # Each scenario's accelerators are detail; what was not available is said anyway.
    assert "ep2/keep-all/calm accelerators: not available: no completed job step" in shown
    assert f"{PP}: accelerators over its steps'" not in shown
    assert main(["--runs-dir", str(runs), "runs", "show", run_id, "--verbose"]) == 0
    shown = capsys.readouterr().out
    assert f"{PP}: accelerators over its steps' 5.00 s" in shown
    assert "J/step" in shown and "(counter)" in shown
    assert "ep2/keep-all/calm accelerators: not available: no completed job step" in shown
    run = load_run(RunStore(runs), run_id)
    assert isinstance(run.summary, DistTrainingSummary)  # round-tripped through JSON
    assert run.summary.scenarios[PP].accelerator == stored[2].scenarios[PP].accelerator
    blocks = run_section(run).blocks
    charts = [b.drawn_by for b in blocks if isinstance(b, Chart)]
    assert ("accelerators",) in charts
    (figures,) = [b for b in blocks if isinstance(b, Table) and "Accelerators" in b.caption]
    assert PP in set(figures.frame["level"])
