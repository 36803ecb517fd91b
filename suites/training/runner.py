"""Runs a training spec: every scenario (policy x skew x size) on the reference trainer,
one run directory, one ``StepRecord`` per optimizer step.

Before the first scenario: the peak FLOP/s of the device (measured on a CPU with the
trainer's threads, a datasheet's on a GPU, or the spec's), and, for a ``budget_ratio``,
the budget (budget.py). Each scenario then builds its own model, data and policy, and
trains (scenario_run.py), to its end before the next (``matrix.order = "sequential"``)
or one step each in turn (``"interleaved"``); its build time is kept apart from its wall
time. Step times are the trainer's ``time.monotonic_ns``, stored from the run's anchor.
"""

from __future__ import annotations

import dataclasses
import functools
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from moeperf.collectors.export.live_export import LiveExporter
from moeperf.collectors.records import StepRecord
from moeperf.collectors.store import RunStore, RunWriter, interrupts_end_runs
from moeperf.collectors.training_summary import (
    PeakFlopsSummary,
    ScenarioOutcome,
    SimulatorCheck,
    TrainingSummary,
    summarize_training,
)
from moeperf.suites.errors import SpecError
from moeperf.suites.run_options import RunOptions
from moeperf.suites.telemetry import Telemetry
from moeperf.suites.training.budget import Budgets
from moeperf.suites.training.dist_spec import DistTrainingSpec
from moeperf.suites.training.observe import observed
from moeperf.suites.training.plan import Scenario, scenarios, sizes
from moeperf.suites.training.predict import ScenarioInputs, check_simulator
from moeperf.suites.training.scenario_run import ScenarioRun, run_in_turn
from moeperf.suites.training.spec import TrainingSpec
from moeperf.suites.training.telemetry import INTERLEAVED
from moeperf.suites.training.telemetry import with_figures as with_device_figures
from moeperf.targets.training.cost_model import host_copy_seconds_per_byte
from moeperf.targets.training.peak import CpuMatmulDetail, PeakFlops, PeakFlopsError, peak_flops
from moeperf.targets.training.setup import DTYPES

MIB = 2**20
TARGET_NAME = "reference-trainer"
Say = Callable[[str], None]


def measure_peak(spec: TrainingSpec | DistTrainingSpec) -> PeakFlops:
    """The MFU denominator, on the threads the trainer will use (in a training-dist spec,
    one rank's)."""
    if spec.peak_flops_per_s is not None:
        return PeakFlops(spec.peak_flops_per_s, "given: peak_flops_per_s in the spec", None)
    torch.set_num_threads(spec.trainer.threads)
    try:
        return peak_flops(spec.trainer.device, DTYPES[spec.trainer.dtype])
    except PeakFlopsError as exc:
        raise SpecError(f"{exc} (in a {spec.suite} spec: peak_flops_per_s = ...)") from None


def peak_summary(peak: PeakFlops) -> PeakFlopsSummary:
    detail = dataclasses.asdict(peak.detail) if peak.detail is not None else None
    return PeakFlopsSummary(flops_per_s=peak.flops_per_s, source=peak.source, detail=detail)


def run_training(
    spec: TrainingSpec,
    spec_given: dict[str, Any],
    store: RunStore,
    options: RunOptions = RunOptions(),  # noqa: B008 (frozen: one shared default is safe)
) -> str:
    """Run every scenario of ``spec`` into one run; return the run id."""
    on_started, say, pushgateway_url = options.on_started, options.say, options.pushgateway_url
    plan = scenarios(spec)
    peak = measure_peak(spec)
    t = spec.trainer
    target = {
        "kind": TARGET_NAME,
        "model": t.init_from,
        "device": t.device,
        "dtype": t.dtype,
        "threads": t.threads,
        "model_configs": {s: dataclasses.asdict(m) for s, m in sizes(spec).items()},
        "peak_flops": dataclasses.asdict(peak_summary(peak)),
    }
    run = store.create(
        "training",
        spec_given=spec_given,
        spec_resolved=spec.model_dump(mode="json"),
        target=target,
    )
    on_started(run)
    _notes(spec, run, peak)
    watch = observed(spec.name, TARGET_NAME, run, spec.export, spec.telemetry, pushgateway_url, say)
    with watch as (exporter, telemetry), run, interrupts_end_runs():
        _run_all(spec, run, plan, peak, exporter, say, telemetry)
    return run.run_id


def _notes(spec: TrainingSpec, run: RunWriter, peak: PeakFlops) -> None:
    run.add_note(
        f"MFU = model FLOPs / (step time x peak FLOP/s); peak {peak.flops_per_s / 1e9:.1f} "
        f"GFLOP/s, {peak.source}"
        + (
            f" ({peak.detail.size}^3 {peak.detail.dtype} matmul on {peak.detail.threads} "
            f"threads, best of {peak.detail.reps})"
            if peak.source == "measured" and isinstance(peak.detail, CpuMatmulDetail)
            else ""
        )
        + "."
    )
    if spec.trainer.device == "cpu":
        run.add_note(
            "Device memory is accounted on the CPU (static + saved activations + a "
            "calibrated working set); an OOM is that account crossing the budget."
        )
    if spec.matrix.order == "interleaved":
        run.add_note(
            "Scenarios ran interleaved: one step of each in turn, every trainer alive, so "
            "the host's drift over the run falls on all of them alike; a scenario's wall time "
            "is the time in its own steps, restarts and checkpoint writes."
        )
    if spec.trainer.budget_ratio is not None:
        run.add_note(
            f"Budget = {spec.trainer.budget_ratio:g} x the highest step peak of keep-all under "
            f"the calm skew with no budget ({spec.trainer.budget_calibration_steps} steps, "
            "measured first in this run)."
        )


def _run_all(
    spec: TrainingSpec,
    run: RunWriter,
    plan: list[Scenario],
    peak: PeakFlops,
    exporter: LiveExporter | None,
    say: Say,
    telemetry: Telemetry | None = None,
) -> None:
    anchor_ns = run.manifest.anchor_monotonic_ns
    budgets = Budgets(spec, run.directory / "checkpoints", say)
    outcomes: list[ScenarioOutcome] = []
    inputs: dict[str, ScenarioInputs] = {}

    def keep(record: StepRecord) -> None:
        run.append_step(record)
        if exporter is not None:
            exporter.observe_step(record, policy=record.scenario)

    runs: list[ScenarioRun] = []
    try:
        for scenario in plan:
            budget = budgets.bytes_for(scenario)
            say(
                f"{scenario.name}: building"
                + (f" (budget {budget / MIB:.1f} MiB)" if budget is not None else "")
            )
            outcome = ScenarioOutcome(
                scenario.name, scenario.policy, scenario.skew, scenario.size, budget
            )
            outcomes.append(outcome)
            scenario_run = ScenarioRun(
                scenario,
                outcome,
                _checkpoint_dir(spec, run, scenario),
                keep,
                peak,
                anchor_ns,
                say,
                spec.trainer.max_ooms,
                built=functools.partial(inputs.__setitem__, scenario.name),
            )
            runs.append(scenario_run)
            if spec.matrix.order == "sequential":
                if telemetry is not None:
                    telemetry.level_started(scenario.name)
                try:
                    while scenario_run.advance():
                        pass
                finally:
                    _close(spec, run, scenario_run)
                    if telemetry is not None:
                        telemetry.level_ended()
        if spec.matrix.order == "interleaved":
            run_in_turn(runs)
        for outcome in outcomes:
            if outcome.stopped:
                run.add_note(f"Scenario {outcome.name} {outcome.stopped}; its figures cover "
                             f"{len(outcome.records)} step records.")  # fmt: skip
    finally:
        for scenario_run in runs:
            _close(spec, run, scenario_run)
        if not spec.trainer.checkpoint_dir:
            shutil.rmtree(run.directory / "checkpoints", ignore_errors=True)
        summary = summarize_training(spec.kind, outcomes, peak_summary(peak), budgets.by_size)
        if telemetry is not None:
            telemetry.finish()
            interleaved = spec.matrix.order == "interleaved"
            if interleaved:
                run.add_note(INTERLEAVED)
            summary = with_device_figures(telemetry, summary, outcomes, interleaved)
        run.write_summary(summary)  # what was measured is on disk before anything predicts
        simulator = _check_simulator(spec, outcomes, summary, inputs, budgets, peak)
        if simulator is not None:
            run.add_note(
                "Simulator check: the cluster simulator configured as this trainer "
                "(targets/cluster_sim/reference.py) predicted each scenario's step time, "
                "peak memory and OOMs before they are compared with what was measured; "
                "predicted figures are simulated, its efficiency fitted on "
                + "; ".join(simulator.fitted_on.values())
                + "."
            )
            run.write_summary(dataclasses.replace(summary, simulator=simulator))


def _checkpoint_dir(spec: TrainingSpec, run: RunWriter, scenario: Scenario) -> Path:
    root = Path(spec.trainer.checkpoint_dir) if spec.trainer.checkpoint_dir else run.directory
    return root / "checkpoints" / scenario.name.replace("/", "_")


def _close(spec: TrainingSpec, run: RunWriter, scenario_run: ScenarioRun) -> None:
    scenario_run.close()
    if not spec.trainer.checkpoint_dir:
        shutil.rmtree(_checkpoint_dir(spec, run, scenario_run.scenario), ignore_errors=True)


def _check_simulator(
    spec: TrainingSpec,
    outcomes: list[ScenarioOutcome],
    summary: TrainingSummary,
    inputs: dict[str, ScenarioInputs],
    budgets: Budgets,
    peak: PeakFlops,
) -> SimulatorCheck | None:
    """The simulator's prediction of each CPU scenario (on CUDA the peak is the
    allocator's, which the simulator's accounted working set does not model)."""
    if spec.trainer.device != "cpu" or not inputs:
        return None
    host_copy = host_copy_seconds_per_byte(torch.device("cpu"))
    return check_simulator(
        outcomes,
        summary.scenarios,
        inputs,
        budgets.by_size,
        peak.flops_per_s,
        host_copy,
        paired=spec.matrix.order == "interleaved",
    )
