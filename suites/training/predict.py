"""Every scenario of a training run predicted by the cluster simulator configured as the
reference trainer (targets.cluster_sim.reference), beside what the trainer measured.

The simulator's one fitted factor, its compute efficiency, comes from keep-all steps under
calm routing with no budget, the first of them left out (it warms the allocator and thread
pools): the budget calibration's steps where the run made at least two (then every
scenario is a prediction), else the keep-all/calm scenario's own (that scenario is then
marked fitted). Per model size, since the efficiency grows with the matmuls.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from collectors.training_summary import (
    BudgetCalibration,
    PredictedScenario,
    ScenarioOutcome,
    SimulatorCheck,
    TrainingScenarioSummary,
)
from targets.cluster_sim import reference
from targets.training.setup import TrainerConfig
from targets.training.skew import profile_by_name

# Issue 18: step time within 10%, peak memory within 5%, per policy and skew profile.
STEP_TOLERANCE = 0.10
PEAK_TOLERANCE = 0.05


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
) -> SimulatorCheck | None:
    """None when no scenario could be predicted (nothing to fit the efficiency on)."""
    efficiency: dict[str, float] = {}
    fitted_on: dict[str, str] = {}
    fitted_scenario: dict[str, str] = {}
    for outcome in outcomes:
        size = outcome.size
        if size in efficiency or outcome.name not in inputs:
            continue
        calibration = budgets.get(size)
        cfg = inputs[outcome.name].config
        if calibration is not None and len(calibration.calibration_step_times_s) > 1:
            # A fresh trainer's first step also warms the allocator and thread pools.
            times = list(calibration.calibration_step_times_s)[1:]
            fitted_on[size] = (
                f"budget calibration ({calibration.calibration}), its {len(times)} steps after "
                "the first"
            )
        else:
            own = _keep_all_calm(outcomes, size)
            if own is None or own.name not in inputs:
                continue
            times = [r.step_time_s for r in own.records][1:] or [own.records[0].step_time_s]
            fitted_scenario[size] = own.name
            fitted_on[size] = f"scenario {own.name}, {len(times)} steps after the first"
        if times:
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
        predicted[outcome.name] = _compare(
            prediction, outcome, summaries[outcome.name], fitted_scenario.get(outcome.size)
        )
    return SimulatorCheck(
        efficiency=efficiency,
        fitted_on=fitted_on,
        scenarios=predicted,
        step_tolerance=STEP_TOLERANCE,
        peak_tolerance=PEAK_TOLERANCE,
        not_predicted=not_predicted,
    )


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


def _compare(
    prediction: reference.ReferencePrediction,
    outcome: ScenarioOutcome,
    summary: TrainingScenarioSummary,
    fitted_scenario: str | None,
) -> PredictedScenario:
    done = prediction.completed
    peaks = [r.peak_memory_bytes for r in outcome.records if r.peak_memory_bytes is not None]
    return PredictedScenario(
        predicted_step_s_p50=statistics.median(s.time_s for s in done) if done else None,
        measured_step_s_p50=statistics.median(r.step_time_s for r in outcome.records),
        predicted_peak_bytes=max(s.peak_bytes for s in done) if done else None,
        measured_peak_bytes=max(peaks) if peaks else None,
        predicted_ooms=prediction.ooms,
        measured_ooms=summary.ooms,
        fitted=fitted_scenario == outcome.name,
    )
