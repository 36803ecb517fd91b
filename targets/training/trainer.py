"""The reference trainer: the tiny MoE on real text, under a device-memory budget.

One step = ``microbatches`` micro-batches with gradient accumulation, run in the order
stage ``stage`` of a ``pipeline_stages``-stage 1F1B pipeline would (pipeline.py), so
activations of several micro-batches are alive at once. Routing skew comes from a seeded
profile (skew.py), the activation policy decides what autograd keeps (policies.py), and
the budget (memory.py) raises an out-of-memory error when the accounted (CPU) or
allocated (GPU) memory crosses it.

An OOM is handled as a real job handles a crash: the step is lost, the last checkpoint
is restored, and the steps since it are replayed; the micro-batch that failed is skipped
on the way (production jobs skip a batch that keeps crashing them; replaying it under the
same routing would fail again). The time lost is recorded.

No global state: rank and world size are passed in and carried by every record, so the
multi-process version (torch.distributed) can run one Trainer per rank.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from moeperf.targets.model.model import MoETransformer
from moeperf.targets.model.train_optim import make_optimizer
from moeperf.targets.training.checkpoint import CheckpointStore, TrainState
from moeperf.targets.training.pipeline import one_f_one_b
from moeperf.targets.training.setup import TrainerConfig, TrainingConfigError, TrainingSetup


class TrainingAbortedError(RuntimeError):
    """The job gave up: more restarts than ``max_restarts``."""


@dataclass(frozen=True)
class StepResult:
    """One optimizer step, as the harness turns it into a StepRecord."""

    step: int
    rank: int
    start_ns: int  # the trainer's clock: time.monotonic_ns unless given
    end_ns: int
    tokens: int
    loss: float  # mean next-token loss over the micro-batches
    model_flops: float
    peak_memory_bytes: int
    tokens_per_expert: list[list[int]]  # [layer][expert], summed over micro-batches
    policy_decisions: list[dict]
    decide_s: float  # time the policy spent deciding, this step
    samples: list[int]  # sample indices trained on (skipped ones excluded)
    events: list[dict] = field(default_factory=list)  # checkpoint, oom, restart, skip


class Trainer:
    def __init__(self, setup: TrainingSetup, clock: Callable[[], int] = time.monotonic_ns):
        self.setup = setup
        self._clock = clock  # monotonic nanoseconds: step times and the work an OOM loses
        self.config: TrainerConfig = setup.config
        self.model: MoETransformer = setup.model
        self.optimizer = make_optimizer(self.model, setup.recipe)
        self.budget = setup.budget
        self.budget.set_static(self.model, self.optimizer)
        static = self.budget.stats().static.total_bytes
        limit = self.config.budget_bytes
        if limit is not None and static >= limit:
            raise TrainingConfigError(
                f"budget_bytes {limit:,} is smaller than the weights, gradients and optimizer "
                f"state alone ({static:,} bytes); give at least that plus activations"
            )
        self.checkpoints = CheckpointStore(Path(self.config.checkpoint_dir))
        self.skipped: set[int] = set()
        self._high_water = 0  # steps completed before any restart
        self._failed_sample = -1
        self.restarts = 0
        self._paused_ns = 0  # time spent suspended at a yield of steps()

    def run(self, on_step: Callable[[StepResult], None]) -> None:
        for result in self.steps():
            on_step(result)

    def steps(self) -> Generator[StepResult, None, None]:
        """The job's completed steps, one at a time: a caller may run several trainers'
        steps in turn (interleaved scenarios see the same host drift). A step's lost
        attempts (OOM, restore) happen inside the ``next()`` that returns it."""
        cfg = self.config
        state = TrainState(step=0, next_sample=0)
        pending: list[dict] = [
            {"kind": "checkpoint", "step": 0,
             "write_s": self.checkpoints.save(self.model, self.optimizer, state)}
        ]  # fmt: skip
        last_checkpoint_ns = self._own_ns()
        while state.step < cfg.steps:
            started_ns = self._clock()
            try:
                result, state = self._step(state, started_ns)
            except self.budget.oom_errors as error:
                message = str(error).splitlines()[0]
                del error  # its traceback holds this step's graphs: free them first
                pending += self._recover(state, message, last_checkpoint_ns)
                state, restore_s = self.checkpoints.restore(self.model, self.optimizer)
                pending[-1]["restore_s"] = restore_s
                last_checkpoint_ns = self._own_ns()  # what a next OOM loses starts here
                continue
            result.events.extend(pending)
            pending = []
            if result.step < self._high_water:
                result.events.append({"kind": "replay", "step": result.step})
            self._high_water = max(self._high_water, state.step)
            if state.step % cfg.checkpoint_every == 0:
                write_s = self.checkpoints.save(self.model, self.optimizer, state)
                last_checkpoint_ns = self._own_ns()
                result.events.append({"kind": "checkpoint", "step": state.step, "write_s": write_s})
            paused_ns = self._clock()
            yield result
            self._paused_ns += self._clock() - paused_ns

    def _own_ns(self) -> int:
        """Monotonic time less the time this job sat suspended between its steps: the work
        an OOM loses is this job's own, not other jobs' stepped in between."""
        return self._clock() - self._paused_ns

    def _recover(self, state: TrainState, message: str, last_checkpoint_ns: int) -> list[dict]:
        self.restarts += 1
        if self.restarts > self.config.max_restarts:
            raise TrainingAbortedError(
                f"{self.restarts} restarts (max_restarts {self.config.max_restarts}): "
                f"the job keeps running out of memory; last: {message}"
            )
        # The whole global batch of the failed step is skipped, as a production job skips a
        # batch that crashed it: with several micro-batches alive, the one whose forward
        # crossed the budget is not always the one that filled it.
        failed = self._failed_sample
        failed_step_samples, _ = self._samples_for_step(state.next_sample)
        self.skipped.update(failed_step_samples)
        self.optimizer.zero_grad(set_to_none=True)
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        lost_s = (self._own_ns() - last_checkpoint_ns) / 1e9
        return [
            {"kind": "oom", "step": state.step, "sample": failed, "message": message},
            {"kind": "skip", "samples": failed_step_samples},
            {"kind": "restart", "from_step": self.checkpoints_step(), "lost_s": lost_s},
        ]

    def checkpoints_step(self) -> int:
        latest = self.checkpoints.latest()
        return int(latest.stem.split("-")[1]) if latest else 0

    def _samples_for_step(self, next_sample: int) -> tuple[list[int], int]:
        samples: list[int] = []
        j = next_sample
        while len(samples) < self.config.microbatches:
            if j not in self.skipped:
                samples.append(j)
            j += 1
        return samples, j

    def _step(self, state: TrainState, started_ns: int) -> tuple[StepResult, TrainState]:
        cfg, setup = self.config, self.setup
        samples, next_sample = self._samples_for_step(state.next_sample)
        setup.set_lr(self.optimizer, state.step)
        self.budget.reset_peak()
        order = one_f_one_b(cfg.pipeline_stages, cfg.stage, cfg.microbatches)
        alive: dict[int, Tensor] = {}
        losses: list[float] = []
        experts = torch.zeros((cfg.model.num_layers, cfg.model.num_experts), dtype=torch.long)
        decisions: list[dict] = []
        decide_s = 0.0
        self.optimizer.zero_grad(set_to_none=True)
        with self.budget.track():
            for phase, mb in order:
                self._failed_sample = samples[mb]
                if phase == "forward":
                    loss, main_loss, tokens_per_expert = self._forward(samples[mb])
                    alive[mb] = loss
                    losses.append(main_loss)
                    experts += tokens_per_expert
                    mb_decisions, mb_decide_s = setup.policy.take_decisions()
                    decisions += [{"microbatch": mb, **d} for d in mb_decisions]
                    decide_s += mb_decide_s
                else:
                    alive.pop(mb).backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), setup.recipe.grad_clip)
        self.optimizer.step()
        if self.model.lm_head.weight.device.type == "cuda":
            torch.cuda.synchronize()
        ended_ns = self._clock()
        tokens = cfg.microbatches * cfg.micro_batch_size * cfg.seq_len
        result = StepResult(
            step=state.step,
            rank=cfg.rank,
            start_ns=started_ns,
            end_ns=ended_ns,
            tokens=tokens,
            loss=sum(losses) / len(losses),
            model_flops=setup.flops_per_token * tokens,
            peak_memory_bytes=self.budget.peak_bytes(),
            tokens_per_expert=experts.tolist(),
            policy_decisions=decisions,
            decide_s=decide_s,
            samples=samples,
        )
        return result, TrainState(state.step + 1, next_sample)

    def _forward(self, sample: int) -> tuple[Tensor, float, Tensor]:
        setup = self.setup
        x, y = setup.batch(sample)
        setup.skew.set_microbatch(sample)
        setup.policy.begin_microbatch()
        out = self.model(x, y)
        loss = out.loss + setup.recipe.aux_loss_weight * out.aux_loss
        if out.mtp_loss is not None:
            loss = loss + setup.recipe.mtp_loss_weight * out.mtp_loss
        return (
            loss / self.config.microbatches,
            float(out.loss.detach()),
            out.tokens_per_expert.cpu(),
        )

    def summary(self) -> dict[str, Any]:
        return {"skipped_samples": sorted(self.skipped)}
