"""Per-scenario figures of a training run, computed from its step records.

Definitions (docs/tutorials/training.md):

- steps: steps completed, each counted once (a step replayed after a restart is not).
- step attempts: every step record (replays included) plus every step an OOM ended.
- OOM rate: OOM events / step attempts.
- time lost: per restart, the work since the last checkpoint that the OOM threw away
  (``lost_s``) plus the checkpoint reload (``restore_s``).
- effective tokens/s: tokens of the completed steps / the scenario's wall time (the
  trainer's whole run: restarts, replays and checkpoint writes included; building the
  model and calibrating are not). What a job actually gets.
- tokens/s: tokens / step time, over every successful step (replays included).
- MFU: the median of the steps' MFU (model FLOPs / (step time x peak FLOP/s)).
- peak memory: p50 / p99 / max over the steps' peaks (numpy linear quantiles).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from moeperf.collectors.accel_records import AcceleratorFigures
from moeperf.collectors.quantiles import ESTIMATOR
from moeperf.collectors.records import StepRecord
from moeperf.collectors.telemetry_records import TelemetrySummary

# Written into every training summary, so that the file explains itself.
DEFINITIONS = {
    "oom_rate": "OOM events / step attempts (step records + steps an OOM ended)",
    "time_lost_s": "per restart: work since the last checkpoint (lost_s) + reload",
    "effective_tokens_per_s": "tokens of completed steps / scenario wall time "
    "(restarts, replays, checkpoint writes included)",
    "tokens_per_s": "tokens / step time of every successful step",
    "mfu_p50": "median over steps of model FLOPs / (step time x peak FLOP/s)",
}


@dataclass
class ScenarioOutcome:
    """What one scenario of a training run measured (filled in by the runner as it goes)."""

    name: str
    policy: str
    skew: str
    size: str
    budget_bytes: int | None
    setup_s: float = 0.0  # building the model, data, budget and policy (not in wall_s)
    wall_s: float = 0.0  # trainer.run: restarts, replays and checkpoint writes included
    records: list[StepRecord] = field(default_factory=list)
    decide_s: float = 0.0  # the policy's deciding time, all steps
    skipped_samples: list[int] = field(default_factory=list)
    stopped: str | None = None  # why the scenario ended before its last step


@dataclass(frozen=True, slots=True)
class PeakMemory:
    """Quantiles of the steps' peak device memory, in bytes (None: no step measured)."""

    p50: float | None
    p99: float | None
    max: float | None


@dataclass(frozen=True, slots=True)
class TrainingScenarioSummary:
    """One scenario (policy x skew [x size]) of a training run."""

    policy: str
    skew: str
    size: str
    budget_bytes: int | None
    steps: int
    stopped: str | None
    step_attempts: int
    ooms: int
    oom_rate: float | None
    restarts: int
    replayed_steps: int
    skipped_samples: tuple[int, ...]
    time_lost_s: float
    checkpoint_write_s: float
    setup_s: float
    wall_s: float
    tokens: int
    effective_tokens_per_s: float | None
    tokens_per_s: float | None
    mfu_p50: float | None
    peak_memory_bytes: PeakMemory
    decide_s: float
    # The accelerators and the trainer's process over the scenario's steps ([telemetry]);
    # None: the sampler was off, read nothing then, or the scenarios ran interleaved.
    accelerator: AcceleratorFigures | None = None


@dataclass(frozen=True, slots=True)
class PeakFlopsSummary:
    """The MFU denominator: FLOP/s, where it comes from, and how it was found."""

    flops_per_s: float
    source: str  # "measured", "datasheet: <citation>" or "given: ..."
    # The measurement's or datasheet entry's own fields, kept as provenance only.
    detail: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class BudgetCalibration:
    """A device-memory budget set as ratio x a measured peak, once per model size."""

    budget_bytes: int
    ratio: float
    calibration_peak_bytes: int
    calibration_step_peaks_bytes: tuple[int, ...]
    calibration: str  # the run that measured the peak, in words
    # Its steps' times: what the simulator's efficiency is fitted on (check_simulator).
    calibration_step_times_s: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class PredictedScenario:
    """One scenario as the cluster simulator, configured as the reference trainer,
    predicted it (targets.cluster_sim.reference), beside what the trainer measured."""

    predicted_step_s_p50: float | None  # median over the successful steps (replays too)
    measured_step_s_p50: float | None
    predicted_peak_bytes: int | None  # the highest successful step's
    measured_peak_bytes: int | None
    predicted_ooms: int
    measured_ooms: int
    fitted: bool  # this scenario's own steps set the efficiency: not a prediction
    # Scenarios run interleaved: this scenario's step at the fitted scenario's pace (its
    # median x the median ratio of the two scenarios' steps in the same rounds), so the
    # host's drift over the run cancels; None when run sequentially or fitted.
    measured_step_s_paired: float | None = None
    paired_rounds: int = 0  # rounds the paired figure rests on
    # Its 95% interval: the fitted median x a percentile bootstrap (over rounds) of the
    # median ratio. The fitted median cancels in the step error (predicted ratio /
    # measured ratio - 1), so this bounds the error's sampling noise.
    measured_step_s_paired_ci: tuple[float, float] | None = None

    @property
    def measured_step_s(self) -> float | None:
        """What the prediction is held to: the paired figure where there is one, else the
        median step time."""
        if self.measured_step_s_paired is not None:
            return self.measured_step_s_paired
        return self.measured_step_s_p50

    @property
    def step_error(self) -> float | None:
        """predicted / measured - 1 of the step time (``measured_step_s``)."""
        return _ratio_error(self.predicted_step_s_p50, self.measured_step_s)

    @property
    def step_error_ci(self) -> tuple[float, float] | None:
        """95% interval of the step error, from the paired figure's."""
        if self.measured_step_s_paired_ci is None or self.predicted_step_s_p50 is None:
            return None
        low_s, high_s = self.measured_step_s_paired_ci
        return self.predicted_step_s_p50 / high_s - 1, self.predicted_step_s_p50 / low_s - 1

    @property
    def peak_error(self) -> float | None:
        return _ratio_error(self.predicted_peak_bytes, self.measured_peak_bytes)


def _ratio_error(predicted: float | None, measured: float | None) -> float | None:
    return predicted / measured - 1 if predicted is not None and measured else None


@dataclass(frozen=True, slots=True)
class SimulatorCheck:
    """The simulator's error on this machine: every scenario predicted, then measured."""

    efficiency: dict[str, float]  # by model size: achieved / peak FLOP/s, the one fitted factor
    fitted_on: dict[str, str]  # by model size: the steps it was fitted on, in words
    scenarios: dict[str, PredictedScenario]
    step_tolerance: float  # issue 18's: step time within 10%, peak memory within 5%
    peak_tolerance: float
    not_predicted: dict[str, str] = field(default_factory=dict)  # scenario -> why not


@dataclass(frozen=True, slots=True)
class TrainingSummary:
    """The summary of a training run: per scenario, then how MFU and the budget were set."""

    SUITE: ClassVar[str] = "training"

    kind: str  # the spec's kind of training run ("mfu", ...)
    scenarios: dict[str, TrainingScenarioSummary]
    peak_flops: PeakFlopsSummary
    budgets: dict[str, BudgetCalibration]  # by model size ("" when the run has one)
    percentile_estimator: str = ESTIMATOR
    definitions: dict[str, str] = field(default_factory=lambda: dict(DEFINITIONS))
    simulator: SimulatorCheck | None = None  # the cluster simulator against this run
    # The accelerator sampler ([telemetry]): its sources' status and its own cost.
    telemetry: TelemetrySummary | None = None


def _events(records: Iterable[StepRecord], kind: str) -> list[dict[str, Any]]:
    return [e for r in records for e in r.events if e.get("kind") == kind]


def is_replay(record: StepRecord) -> bool:
    return any(e.get("kind") == "replay" for e in record.events)


def _quantile(values: list[float], q: float) -> float | None:
    return float(np.quantile(values, q, method="linear")) if values else None


def summarize_scenario(outcome: ScenarioOutcome) -> TrainingScenarioSummary:
    records = outcome.records
    completed = [r for r in records if not is_replay(r)]
    ooms = len(_events(records, "oom"))
    restarts = _events(records, "restart")
    attempts = len(records) + ooms
    tokens = sum(r.tokens for r in completed)
    step_time_s = sum(r.step_time_s for r in records)
    peaks = [float(r.peak_memory_bytes) for r in records if r.peak_memory_bytes is not None]
    mfus = [r.mfu for r in records if r.mfu is not None]
    return TrainingScenarioSummary(
        policy=outcome.policy,
        skew=outcome.skew,
        size=outcome.size,
        budget_bytes=outcome.budget_bytes,
        steps=len(completed),
        stopped=outcome.stopped,
        step_attempts=attempts,
        ooms=ooms,
        oom_rate=ooms / attempts if attempts else None,
        restarts=len(restarts),
        replayed_steps=len(records) - len(completed),
        skipped_samples=tuple(outcome.skipped_samples),
        time_lost_s=sum(
            float(e.get("lost_s") or 0.0) + float(e.get("restore_s") or 0.0) for e in restarts
        ),
        checkpoint_write_s=sum(float(e["write_s"]) for e in _events(records, "checkpoint")),
        setup_s=outcome.setup_s,
        wall_s=outcome.wall_s,
        tokens=tokens,
        effective_tokens_per_s=tokens / outcome.wall_s if outcome.wall_s > 0 else None,
        tokens_per_s=sum(r.tokens for r in records) / step_time_s if step_time_s else None,
        mfu_p50=_quantile(mfus, 0.5),
        peak_memory_bytes=PeakMemory(
            p50=_quantile(peaks, 0.5),
            p99=_quantile(peaks, 0.99),
            max=max(peaks) if peaks else None,
        ),
        decide_s=outcome.decide_s,
    )


def summarize_training(
    kind: str,
    outcomes: list[ScenarioOutcome],
    peak: PeakFlopsSummary,
    budgets: dict[str, BudgetCalibration],
) -> TrainingSummary:
    """The run's summary: per scenario, then how MFU and the budget were set."""
    return TrainingSummary(
        kind=kind,
        scenarios={o.name: summarize_scenario(o) for o in outcomes},
        peak_flops=peak,
        budgets=dict(budgets),
    )
