"""The device-memory budget of a training run: the spec's bytes, or ``budget_ratio`` x a
peak measured first, in the same run: keep-all under the calm skew with no budget, for
``budget_calibration_steps`` steps, the highest step's peak; once per model size.
"""

from __future__ import annotations

import dataclasses
import gc
import shutil
from collections.abc import Callable
from pathlib import Path

from moeperf.collectors.training_summary import BudgetCalibration
from moeperf.suites.errors import SpecError
from moeperf.suites.training.plan import Scenario, build_trainer
from moeperf.suites.training.spec import TrainingSpec
from moeperf.targets.training.trainer import StepResult

MIB = 2**20


def calibrate_budget(
    spec: TrainingSpec, scenario: Scenario, scratch: Path, say: Callable[[str], None]
) -> BudgetCalibration:
    """ratio x the highest peak of keep-all under calm, unlimited, for a few steps."""
    t = spec.trainer
    config = dataclasses.replace(
        scenario.config,
        policy="keep-all",
        skew="calm",
        replay_path=None,
        budget_bytes=None,
        steps=t.budget_calibration_steps,
        checkpoint_every=t.budget_calibration_steps + 1,
        checkpoint_dir=str(scratch),
    )
    what = "budget calibration" + (f" (size {scenario.size})" if scenario.size else "")
    trainer, _ = build_trainer(config, what)
    static = trainer.budget.stats().static.total_bytes
    peaks: list[int] = []
    times_s: list[float] = []

    def on_step(result: StepResult) -> None:
        peaks.append(result.peak_memory_bytes)
        times_s.append((result.end_ns - result.start_ns) / 1e9)

    try:
        trainer.run(on_step)
    finally:
        del trainer
        gc.collect()
        shutil.rmtree(scratch, ignore_errors=True)
    ratio = t.budget_ratio
    assert ratio is not None, "Budgets calibrates only for a budget_ratio"
    budget = int(ratio * max(peaks))
    if budget <= static:
        raise SpecError(
            f"trainer.budget_ratio: {t.budget_ratio:g} x the keep-all/calm peak "
            f"({max(peaks):,} bytes) = {budget:,} bytes, below the weights, gradients and "
            f"optimizer state alone ({static:,} bytes); give a ratio above "
            f"{static / max(peaks):.2f}"
        )
    say(
        f"{what}: keep-all/calm peaks {', '.join(f'{p / MIB:.1f}' for p in peaks)} MiB; "
        f"budget = {t.budget_ratio:g} x {max(peaks) / MIB:.1f} = {budget / MIB:.1f} MiB"
    )
    return BudgetCalibration(
        budget_bytes=budget,
        ratio=ratio,
        calibration_peak_bytes=max(peaks),
        calibration_step_peaks_bytes=tuple(peaks),
        calibration="keep-all, calm skew, no budget",
        calibration_step_times_s=tuple(times_s),
    )


class Budgets:
    """The budget of each model size: the spec's bytes, or calibrated once on first use."""

    def __init__(self, spec: TrainingSpec, scratch: Path, say: Callable[[str], None]):
        self._spec, self._scratch, self._say = spec, scratch, say
        self.by_size: dict[str, BudgetCalibration] = {}

    def bytes_for(self, scenario: Scenario) -> int | None:
        t = self._spec.trainer
        if t.budget_ratio is None:
            return t.budget_bytes
        if scenario.size not in self.by_size:
            scratch = self._scratch / f"calibration-{scenario.size or 'model'}"
            self.by_size[scenario.size] = calibrate_budget(self._spec, scenario, scratch, self._say)
        return self.by_size[scenario.size].budget_bytes
