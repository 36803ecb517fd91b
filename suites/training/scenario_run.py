"""One scenario of a training run, stepped by its caller: built, advanced one optimizer step
at a time, closed.

The runner either runs each scenario to its end before the next (``sequential``) or gives
every scenario one step in turn (``interleaved``): on a shared host whose speed drifts
over the minutes of a run, interleaved scenarios meet the same drift, so their step times
compare side by side (the gate's interleaved A/B, applied to policies). Either way a
scenario's wall time is the time spent in its own steps: its restarts, replays and
checkpoint writes included, the other scenarios' steps not.
"""

from __future__ import annotations

import dataclasses
import gc
import time
from collections.abc import Callable
from pathlib import Path

from moeperf.collectors.records import StepRecord
from moeperf.collectors.training_summary import ScenarioOutcome
from moeperf.suites.training.plan import Scenario, build_trainer
from moeperf.suites.training.predict import ScenarioInputs
from moeperf.targets.training.peak import PeakFlops, mfu
from moeperf.targets.training.trainer import StepResult, Trainer, TrainingAbortedError

MIB = 2**20
Say = Callable[[str], None]


def step_record(result: StepResult, scenario: str, anchor_ns: int, peak: PeakFlops) -> StepRecord:
    """A trainer step as stored: times from the run's anchor, MFU against ``peak``."""
    step_time_s = (result.end_ns - result.start_ns) / 1e9
    return StepRecord(
        step=result.step,
        rank=result.rank,
        start_ns=result.start_ns - anchor_ns,
        end_ns=result.end_ns - anchor_ns,
        tokens=result.tokens,
        scenario=scenario,
        loss=result.loss,
        model_flops=result.model_flops,
        mfu=mfu(result.model_flops, step_time_s, peak) if step_time_s > 0 else None,
        peak_memory_bytes=result.peak_memory_bytes,
        tokens_per_expert=result.tokens_per_expert,
        policy_decisions=result.policy_decisions,
        events=list(result.events),
    )


class ScenarioRun:
    """``scenario``'s trainer, filling ``outcome`` as it steps (an interrupted scenario
    keeps what it measured). After ``max_ooms`` OOMs (default: one per step) the trainer
    gives up (its max_restarts), noted in ``outcome.stopped``. ``built`` gets what the
    simulator needs to predict the scenario, once its trainer exists."""

    def __init__(
        self,
        scenario: Scenario,
        outcome: ScenarioOutcome,
        checkpoint_dir: Path,
        keep: Callable[[StepRecord], None],
        peak: PeakFlops,
        anchor_ns: int,
        say: Say,
        max_ooms: int | None = None,
        built: Callable[[ScenarioInputs], None] = lambda _inputs: None,
    ):
        self.scenario, self.outcome = scenario, outcome
        self._keep, self._peak, self._anchor_ns, self._say = keep, peak, anchor_ns, say
        self.config = dataclasses.replace(
            scenario.config,
            budget_bytes=outcome.budget_bytes,
            checkpoint_dir=str(checkpoint_dir),
            max_restarts=max_ooms or scenario.config.steps,
        )
        trainer, outcome.setup_s = build_trainer(self.config, f"scenario {scenario.name}")
        working_set = trainer.setup.working_set
        built(
            ScenarioInputs(
                config=self.config,
                static_bytes=trainer.budget.stats().static.total_bytes,
                working_set_bytes=working_set.working_set_bytes if working_set else None,
            )
        )
        self._trainer: Trainer | None = trainer
        self._steps = trainer.steps()
        self.done = False

    def advance(self) -> bool:
        """One completed step (its lost attempts before it); False once the scenario has
        ended, by finishing or by giving up."""
        if self.done:
            return False
        started = time.perf_counter()
        try:
            result = next(self._steps)
        except StopIteration:
            self.done = True
            return False
        except TrainingAbortedError as stop:
            self.outcome.stopped = f"stopped: {stop}"
            self._say(f"{self.scenario.name}: {stop}")
            self.done = True
            return False
        finally:
            self.outcome.wall_s += time.perf_counter() - started
        self._record(result)
        return True

    def close(self) -> None:
        """Free the trainer (its model, optimizer state and checkpoints' handles)."""
        if self._trainer is None:
            return
        self.outcome.skipped_samples = self._trainer.summary()["skipped_samples"]
        self._steps.close()
        self._trainer = None
        gc.collect()

    def _record(self, result: StepResult) -> None:
        name, outcome = self.scenario.name, self.outcome
        record = step_record(result, name, self._anchor_ns, self._peak)
        outcome.records.append(record)
        outcome.decide_s += result.decide_s
        self._keep(record)
        kinds = [e["kind"] for e in result.events if e["kind"] != "checkpoint"]
        self._say(
            f"{name}: step {result.step + 1}/{self.config.steps} "
            f"{record.step_time_s:.2f} s, peak {result.peak_memory_bytes / MIB:.1f} MiB"
            + (f" [{', '.join(kinds)}]" if kinds else "")
        )


def run_in_turn(runs: list[ScenarioRun]) -> None:
    """Every run one step in turn (round 1 of each, then round 2, ...) until all ended."""
    active = list(runs)
    while active:
        active = [r for r in active if r.advance()]
