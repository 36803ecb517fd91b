"""The summary of a cluster-simulation run (suite "simulation"): every figure is simulated.

Definitions (docs/tutorials/cluster-simulation.md), per scenario (job x policy x
skew), over its simulated iterations:

- step time: p50 of the completed iterations' times (the 1F1B makespan + optimizer step).
- MFU: mean over completed iterations of model FLOPs / (time x peak x devices); effective
  MFU: completed iterations' model FLOPs / (wall time x peak x devices), where wall time
  counts restarts (the work since the last checkpoint, again, plus the restart cost) and
  checkpoint writes.
- OOM rate: iterations that crossed a device's memory / iterations attempted.
- effective tokens/s per device: completed iterations' tokens / wall time / devices.
- bubble: the idle share of all stages over the makespan (mean over completed
  iterations), beside (p - 1) / (m + p - 1).
- speedup (ablation): a policy's effective tokens/s / the baseline's, same job and skew.
- error (published runs): simulated / published - 1, in the published unit; a row is
  calibration (the fitted constants were chosen on it) or validation (held out: its error
  is the simulator's); the validation rows' median absolute error is their accuracy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

DEFINITIONS = {
    "step_time_p50_s": "p50 over completed iterations of the simulated iteration time",
    "mfu_mean": "mean over completed iterations of model FLOPs / (time x peak x devices)",
    "effective_mfu": "completed model FLOPs / (wall time incl. restarts x peak x devices)",
    "oom_rate": "iterations over a device's memory / iterations attempted",
    "effective_tokens_per_s_per_device": "completed tokens / wall time / devices",
    "bubble": "idle share of all stages over the makespan; formula (p - 1) / (m + p - 1)",
    "speedup": "effective tokens/s of a policy / the baseline's, same job and skew",
    "error": "simulated / published - 1, in the published unit (tokens/s/GPU or TFLOP/s/GPU)",
    "validation": "published rows held out of the calibration: their errors are the accuracy",
}


@dataclass(frozen=True)
class SimScenario:
    job: str
    policy: str
    skew: str
    devices: int
    parameters: float
    layout: str  # e.g. "TP1 PP16 EP64 DP768, m=32"
    iterations: int
    completed: int
    ooms: int
    oom_rate: float
    step_time_p50_s: float | None
    mfu_mean: float | None
    effective_mfu: float
    effective_tokens_per_s_per_device: float
    bubble: float | None
    bubble_formula: float
    memory_bytes: float
    # Per pipeline stage, the highest rank's peak over the iterations.
    peak_memory_bytes_by_stage: list[float]
    recompute_s_mean: float  # extra seconds per iteration the policy added (all stages)
    moved_s_mean: float  # of those, run in bubbles (dual-batch interleaving)
    decision_s_p50: float | None  # the dual-batch plan's host time per iteration (measured)
    decision_s_max: float | None


@dataclass(frozen=True)
class AblationRow:
    job: str
    skew: str
    step: str  # "operator-level policy", "+ runtime adaptation", "+ dual-batch overlap", ...
    policy: str
    baseline: str
    speedup: float | None  # None: the baseline completed nothing
    paper: str  # seed 000's figure for this step, labelled as the paper's


@dataclass(frozen=True)
class Reproduction:
    name: str
    model: str
    cluster: str
    devices: int
    layout: str
    policy: str
    metric: str  # "tokens/s/GPU" or "TFLOP/s/GPU"
    published: float
    simulated: float | None
    source: str
    # "calibration": the fitted constants were chosen on it; "validation": held out;
    # "reference": neither (a spec without a calibration).
    role: str = "reference"
    recipe: str = ""  # the recipe's options that are on, e.g. "fp8, deepep, a2a overlap"

    @property
    def error(self) -> float | None:
        return None if self.simulated is None else self.simulated / self.published - 1


@dataclass(frozen=True)
class NotTaken:
    """A published row the simulator cannot take, and why."""

    name: str
    published: float
    metric: str
    source: str
    reason: str


IDENTIFIED_SENSITIVITY = 0.25


@dataclass(frozen=True)
class Calibration:
    """Constants fitted on the calibration rows (least squares on log(simulated /
    published)); every other published row is simulated with them."""

    constants: dict[str, float]  # e.g. {"gemm_efficiency": 0.71}
    rows: list[str]  # the calibration rows' names
    rms_log_error: float  # over the calibration rows, at the fit
    evaluations: int  # simulations the fit ran
    # Per constant, d log(simulated) / d log(constant) on its most sensitive calibration
    # row, at the fit: below IDENTIFIED_SENSITIVITY the rows barely move with it, and the
    # fitted value says little about the constant.
    sensitivity: dict[str, float] = field(default_factory=dict)
    at_bound: list[str] = field(default_factory=list)  # constants the fit pinned to a bound

    def unidentified(self) -> list[str]:
        return [k for k, v in self.sensitivity.items() if abs(v) < IDENTIFIED_SENSITIVITY]


@dataclass(frozen=True)
class Accuracy:
    """The validation rows' errors (each simulated / published - 1)."""

    rows: int
    within_tolerance: int  # |error| <= tolerance
    tolerance: float  # 0.15: issue 42's bar per row
    median_abs_error: float
    worst: str  # the row with the largest |error|
    worst_error: float


@dataclass
class SimulationSummary:
    SUITE: ClassVar[str] = "simulation"
    scenarios: dict[str, SimScenario] = field(default_factory=dict)
    ablation: list[AblationRow] = field(default_factory=list)
    reproductions: list[Reproduction] = field(default_factory=list)
    calibration: Calibration | None = None
    not_taken: list[NotTaken] = field(default_factory=list)
    accuracy: Accuracy | None = None
    # What the figures rest on: presets' assumptions, efficiencies, what is not modelled.
    assumptions: list[str] = field(default_factory=list)
    definitions: dict[str, str] = field(default_factory=lambda: dict(DEFINITIONS))
