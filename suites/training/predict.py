"""Every scenario of a training run predicted by the cluster simulator configured as the
reference trainer (targets.cluster_sim.reference), beside what the trainer measured.

The simulator's one fitted factor, its compute efficiency, comes from keep-all steps under
calm routing with no budget, the first of them left out (it warms the allocator and thread
pools): the keep-all/calm scenario's own where it has a few (that scenario is then marked
fitted, not a prediction; every other one is), else the budget calibration's. Per model
size, since the efficiency grows with the matmuls.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import numpy as np

from moeperf.collectors.bootstrap import bootstrap_statistic
from moeperf.collectors.training_summary import (
    BudgetCalibration,
    PredictedScenario,
    ScenarioOutcome,
    SimulatorCheck,
    TrainingScenarioSummary,
)
from moeperf.targets.cluster_sim import reference
from moeperf.targets.training.setup import TrainerConfig
from moeperf.targets.training.skew import profile_by_name

# Issue 18: step time within 10%, peak memory within 5%, per policy and skew profile.
STEP_TOLERANCE = 0.10
PEAK_TOLERANCE = 0.05
MIN_FIT_STEPS = 3  # steps after the first, to fit the efficiency on one scenario's steps


@dataclass(frozen=True)
class ScenarioInputs:
    """What the runner read off a scenario's trainer once built, before it trained."""

    config: TrainerConfig  # budget, checkpoints and restarts as the scenario ran
    static_bytes: int
    working_set_bytes: int | None  # None on CUDA: the allocator's own, not calibrated


def check_simulator(
    outcomes: list[ScenarioOutcome],
    summaries: dict[str, TrainingScenarioSummary],
    inputs: dict[str, ScenarioInputs],
    budgets: dict[str, BudgetCalibration],
    peak_flops_per_s: float,
    host_copy_s_per_byte: float,
    paired: bool = False,
) -> SimulatorCheck | None:
    """None when no scenario could be predicted (nothing to fit the efficiency on).
    ``paired``: the scenarios ran interleaved, so each one's steps are compared with the
    fitted scenario's steps of the same rounds (``paired_step_s``)."""
    efficiency: dict[str, float] = {}
    fitted_on: dict[str, str] = {}
    fitted_scenario: dict[str, str] = {}
    for outcome in outcomes:
        size = outcome.size
        if size in efficiency or outcome.name not in inputs:
            continue
        cfg = inputs[outcome.name].config
        fit = _fit_steps(outcomes, budgets.get(size), size)
        if fit is None:
            continue
        times, fitted_on[size], own = fit
        if own is not None:
            fitted_scenario[size] = own
        efficiency[size] = reference.fit_efficiency(cfg, times, peak_flops_per_s)
    if not efficiency:
        return None
    predicted: dict[str, PredictedScenario] = {}
    not_predicted: dict[str, str] = {}
    for outcome in outcomes:
        why = _why_not(outcome, inputs, efficiency)
        if why is not None:
            not_predicted[outcome.name] = why
            continue
        given = inputs[outcome.name]
        assert given.working_set_bytes is not None, "_why_not refuses CUDA scenarios"
        cal = reference.ReferenceCalibration(
            peak_flops_per_s=peak_flops_per_s,
            efficiency=efficiency[outcome.size],
            static_bytes=given.static_bytes,
            working_set_bytes=given.working_set_bytes,
            host_copy_s_per_byte=host_copy_s_per_byte,
        )
        cfg = given.config
        profile = profile_by_name(cfg.skew, cfg.skew_seed, cfg.replay_path, cfg.model)
        prediction = reference.predict(cfg, cal, profile, cfg.budget_bytes)
        fitted = _named(outcomes, fitted_scenario.get(outcome.size))
        predicted[outcome.name] = _compare(
            prediction, outcome, summaries[outcome.name], fitted, paired
        )
    return SimulatorCheck(
        efficiency=efficiency,
        fitted_on=fitted_on,
        scenarios=predicted,
        step_tolerance=STEP_TOLERANCE,
        peak_tolerance=PEAK_TOLERANCE,
        not_predicted=not_predicted,
    )


def _fit_steps(
    outcomes: list[ScenarioOutcome], calibration: BudgetCalibration | None, size: str
) -> tuple[list[float], str, str | None] | None:
    """The step times to fit on, in words, and the scenario they are from (None: the
    budget calibration's). The keep-all/calm scenario where it has MIN_FIT_STEPS steps
    after its first (a median of a few steps on a busy host is the steadier figure), else
    the budget calibration's steps after its first. A fresh trainer's first step also
    warms the allocator and thread pools: left out where there are others."""
    own = _keep_all_calm(outcomes, size)
    if own is not None and len(own.records) > MIN_FIT_STEPS:
        times = [r.step_time_s for r in own.records][1:]
        return times, f"scenario {own.name}, its {len(times)} steps after the first", own.name
    if calibration is not None and len(calibration.calibration_step_times_s) > 1:
        times = list(calibration.calibration_step_times_s)[1:]
        what = f"budget calibration ({calibration.calibration}), its {len(times)} steps"
        what += " after the first"
        return times, what, None
    if own is not None and own.records:
        times = [r.step_time_s for r in own.records][1:] or [own.records[0].step_time_s]
        return times, f"scenario {own.name}, {len(times)} step(s)", own.name
    return None


def _keep_all_calm(outcomes: list[ScenarioOutcome], size: str) -> ScenarioOutcome | None:
    for o in outcomes:
        if (o.policy, o.skew, o.size) == ("keep-all", "calm", size) and o.records:
            return o
    return None


def _why_not(
    outcome: ScenarioOutcome, inputs: dict[str, ScenarioInputs], efficiency: dict[str, float]
) -> str | None:
    given = inputs.get(outcome.name)
    if given is None:
        return "its trainer was never built"
    if given.working_set_bytes is None:
        return (
            "on CUDA the peak is the allocator's; the simulator's working set is calibrated"
            " on the accounted CPU budget only"
        )
    if outcome.size not in efficiency:
        return "no keep-all/calm steps of this size to fit the efficiency on"
    if not outcome.records:
        return "no step measured to compare with"
    return None


def _named(outcomes: list[ScenarioOutcome], name: str | None) -> ScenarioOutcome | None:
    return next((o for o in outcomes if o.name == name), None)


@dataclass(frozen=True)
class PairedStep:
    """A scenario's step time at the fitted scenario's pace (``paired_step_s``)."""

    step_s: float
    rounds: int
    step_s_ci: tuple[float, float]  # 95%: a percentile bootstrap of the ratio, over rounds


def paired_step_s(outcome: ScenarioOutcome, fitted: ScenarioOutcome) -> PairedStep | None:
    """The scenario's step time at the fitted scenario's pace: the fitted scenario's median
    step (the one the efficiency is fitted on) x the median, over the rounds both ran, of
    this scenario's step / the fitted scenario's step in the same round. Interleaved, the
    r-th step of every scenario is round r (a step's lost attempts run inside it), and
    within a round the host's pace is nearly shared, so the ratio cancels the drift that a
    median over minutes keeps. Round 0 is left out, as in the fit (a fresh trainer's first
    step warms the allocator). The fitted median cancels in the step error (predicted /
    this - 1 = predicted ratio / measured ratio - 1), so the ratio's interval is the
    error's."""
    mine = [r.step_time_s for r in outcome.records][1:]
    theirs = [r.step_time_s for r in fitted.records][1:]
    rounds = min(len(mine), len(theirs))
    if rounds == 0:
        return None
    ratios = np.array(mine[:rounds]) / np.array(theirs[:rounds])
    pace_s = statistics.median(theirs)
    replicates = bootstrap_statistic(ratios, "median", n_boot=2000)
    low, high = np.quantile(replicates, [0.025, 0.975])
    ci = (pace_s * float(low), pace_s * float(high))
    return PairedStep(pace_s * float(np.median(ratios)), rounds, ci)


def _compare(
    prediction: reference.ReferencePrediction,
    outcome: ScenarioOutcome,
    summary: TrainingScenarioSummary,
    fitted: ScenarioOutcome | None,
    paired: bool,
) -> PredictedScenario:
    done = prediction.completed
    peaks = [r.peak_memory_bytes for r in outcome.records if r.peak_memory_bytes is not None]
    own = fitted is not None and fitted.name == outcome.name
    pair = paired_step_s(outcome, fitted) if paired and fitted is not None and not own else None
    return PredictedScenario(
        predicted_step_s_p50=statistics.median(s.time_s for s in done) if done else None,
        measured_step_s_p50=statistics.median(r.step_time_s for r in outcome.records),
        predicted_peak_bytes=max(s.peak_bytes for s in done) if done else None,
        measured_peak_bytes=max(peaks) if peaks else None,
        predicted_ooms=prediction.ooms,
        measured_ooms=summary.ooms,
        fitted=own,
        measured_step_s_paired=pair.step_s if pair else None,
        paired_rounds=pair.rounds if pair else 0,
        measured_step_s_paired_ci=pair.step_s_ci if pair else None,
    )
