"""One rank of the distributed reference trainer: its slice of the model, its micro-batches,
the real communication between them.

A step: the rank's share of the step's micro-batches (``microbatches / (ep x dp)``) through
its stage in 1F1B order (activations and their gradients sent to the neighbouring stages),
each MoE layer's tokens dispatched to and combined from the experts' ranks by all-to-all;
then the gradients summed over the ranks holding the same weights, clipped by the norm of
the whole model's gradient, and one AdamW step. The arithmetic is the single-process
trainer's (targets/training/trainer.py) on the same samples: each micro-batch's loss is
divided by the step's micro-batch count and gradients add up, so the two agree to float
rounding (the order of the sums differs).

The activation policy runs per rank on that rank's own loads: ``after_routing`` sees the
token-slots its experts received from every rank. An OOM on any rank ends the job; the
launcher restarts every rank from the newest complete sharded checkpoint.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from moeperf.targets.model.config import MoEConfig
from moeperf.targets.model.train_optim import make_optimizer
from moeperf.targets.training.checkpoint import TrainState
from moeperf.targets.training.distributed.comm import Comm, ExpertTraffic
from moeperf.targets.training.distributed.layout import Layout, local_experts, stage_layers
from moeperf.targets.training.distributed.rank_step import RankStep
from moeperf.targets.training.distributed.shards import ShardedCheckpoints
from moeperf.targets.training.distributed.stage import (
    StagePlan,
    cut_to_stage,
    spread_experts,
    stage_forward,
)
from moeperf.targets.training.memory import AccountedBudget, CudaBudget, training_static_bytes
from moeperf.targets.training.pipeline import one_f_one_b
from moeperf.targets.training.policies import AdaptivePolicy
from moeperf.targets.training.setup import TrainerConfig, TrainingConfigError, build


@dataclass(frozen=True)
class DistConfig:
    """What every rank of one launch is given (a JSON file beside the run)."""

    trainer: TrainerConfig
    layout: Layout
    out_dir: str  # records/ and checkpoints/ go here
    attempt: int = 0
    skip_samples: tuple[int, ...] = ()  # whole steps' samples skipped after an OOM
    replayed_below: int = 0  # steps before this one ran in an earlier attempt

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> DistConfig:
        data = json.loads(text)
        trainer = data["trainer"]
        trainer["model"] = MoEConfig(**trainer["model"])
        return cls(
            trainer=TrainerConfig(**trainer),
            layout=Layout(**data["layout"]),
            out_dir=data["out_dir"],
            attempt=data["attempt"],
            skip_samples=tuple(data["skip_samples"]),
            replayed_below=data["replayed_below"],
        )


def _is_expert(name: str) -> bool:
    return ".experts." in name


class RankTrainer:
    def __init__(
        self,
        config: DistConfig,
        rank: int,
        comm: Comm,
        clock: Callable[[], int] = time.monotonic_ns,
    ):
        self.config, self.comm, self._clock = config, comm, clock
        cfg, layout = config.trainer, config.layout
        self.layout, self.rank = layout, rank
        self.coords = layout.coords(rank)
        # The whole model is built and calibrated here first (the working set, the adaptive
        # policy's costs: one process's forward, no collectives), with no budget: the
        # rank's budget holds the rank's slice, set once the model is cut to it.
        self.setup = build(
            dataclasses.replace(
                cfg,
                budget_bytes=None,
                expert_parallel=1,
                pipeline_stages=1,
                stage=0,
                rank=rank,
                world_size=layout.world_size,
            )
        )
        model = self.setup.model
        layout.check(model.config.num_experts, model.config.num_layers, cfg.microbatches)
        self.plan = StagePlan(
            stage_layers(layout, self.coords.stage, model.config.num_layers),
            first=self.coords.stage == 0,
            last=self.coords.stage == layout.pp - 1,
        )
        # The policy itself, without the one-process emulation of the hottest expert rank:
        # this rank's experts are real, and the policy sees what they receive.
        self.policy = self.setup.policy.policy
        model.set_runner(self.policy)
        cut_to_stage(model, self.plan)
        self.ep_layers = (
            spread_experts(
                model,
                local_experts(layout, self.coords.ep_index, model.config.num_experts),
                layout.expert_group(rank),
                comm,
            )
            if layout.ep > 1
            else []
        )
        self.model = model
        self.optimizer = make_optimizer(model, self.setup.recipe)
        self.budget = self._rank_budget(cfg.budget_bytes)
        named = [(n, p) for n, p in model.named_parameters()]
        self.expert_params = [p for n, p in named if _is_expert(n)]
        self.dense_params = [p for n, p in named if not _is_expert(n)]
        self.tied = (
            layout.pp > 1 and model.config.mtp_depth > 0 and (self.plan.first or self.plan.last)
        )
        embedding = model.model.embed_tokens
        # The last stage's copy of the embedding is the first stage's: counted once in the norm.
        self._norm_skip = (
            {id(p) for p in embedding.parameters()} if self.tied and not self.plan.first else set()
        )
        self.checkpoints = ShardedCheckpoints(Path(config.out_dir) / "checkpoints", rank)
        self.skipped = set(config.skip_samples)
        device = torch.device(cfg.device)
        tokens = cfg.micro_batch_size * cfg.seq_len
        self.activation = torch.empty(
            (tokens, model.config.hidden_size),
            dtype=next(model.parameters()).dtype,
            device=device,
        )

    def _rank_budget(self, limit_bytes: int | None) -> AccountedBudget | CudaBudget:
        """This rank's device-memory budget: its own weights, gradients and optimizer state,
        the working set calibrated on the whole model, against ``limit_bytes``."""
        setup = self.setup
        static = training_static_bytes(self.model, self.optimizer).total_bytes
        working_set = setup.working_set.working_set_bytes if setup.working_set else 0
        if limit_bytes is not None and static + working_set >= limit_bytes:
            raise TrainingConfigError(
                f"budget_bytes {limit_bytes:,} is smaller than rank {self.rank}'s weights, "
                f"gradients and optimizer state ({static:,} bytes) and working set "
                f"({working_set:,} bytes) alone"
            )
        budget: AccountedBudget | CudaBudget
        if isinstance(setup.budget, CudaBudget):
            setup.budget.close()  # build's, unlimited: the cap is process-wide state
            budget = CudaBudget(limit_bytes, torch.device("cuda"))
        else:
            budget = AccountedBudget(limit_bytes, working_set_bytes=working_set)
        budget.set_static(self.model, self.optimizer)
        if isinstance(self.policy, AdaptivePolicy):
            self.policy.budget = budget  # it predicts against this rank's budget
            # ... and over this stage's blocks only (the MTP module's on the last stage)
            mtp = range(self.model.config.num_layers, self.model.num_slots)
            self.policy.blocks = tuple(self.plan.layers) + (tuple(mtp) if self.plan.last else ())
        setup.budget = budget
        return budget

    # -- the step ---------------------------------------------------------------------------

    def samples_for_step(self, next_sample: int) -> tuple[list[int], int]:
        """The step's micro-batches, all ranks' (skipped samples passed over), and the next."""
        samples: list[int] = []
        j = next_sample
        while len(samples) < self.config.trainer.microbatches:
            if j not in self.skipped:
                samples.append(j)
            j += 1
        return samples, j

    def step(self, state: TrainState) -> tuple[RankStep, TrainState]:
        cfg, layout, comm = self.config.trainer, self.layout, self.comm
        step_samples, next_sample = self.samples_for_step(state.next_sample)
        m = cfg.microbatches // layout.data_width
        d = self.coords.data_index(layout)
        mine = step_samples[d * m : (d + 1) * m]
        self.setup.set_lr(self.optimizer, state.step)
        self.budget.reset_peak()
        comm.new_step()
        for ep_layer in self.ep_layers:
            ep_layer.take_traffic()
        started_ns = self._clock()
        losses, experts, decisions, decide_s = self._microbatches(mine)
        microbatch_s = (self._clock() - started_ns) / 1e9
        self._sum_gradients()
        loss_sum = sum(losses)
        total_norm, loss_total = self._global_norm_and_loss(loss_sum)
        coef = self.setup.recipe.grad_clip / (total_norm + 1e-6)
        if coef < 1.0:  # torch.nn.utils.clip_grad_norm_'s rule, on the whole model's norm
            for p in self.model.parameters():
                if p.grad is not None:
                    p.grad.mul_(coef)
        self.optimizer.step()
        if cfg.device == "cuda":
            torch.cuda.synchronize()
        ended_ns = self._clock()
        times = comm.new_step()
        traffic = ExpertTraffic()
        for ep_layer in self.ep_layers:
            done = ep_layer.take_traffic()
            traffic.tokens_per_local_expert |= done.tokens_per_local_expert
            traffic.dispatched_tokens |= done.dispatched_tokens
            traffic.received_tokens |= done.received_tokens
        layers = list(self.plan.layers)
        step_s = (ended_ns - started_ns) / 1e9
        tokens = m * cfg.micro_batch_size * cfg.seq_len
        job_tokens = cfg.microbatches * cfg.micro_batch_size * cfg.seq_len
        result = RankStep(
            step=state.step,
            rank=self.rank,
            stage=self.coords.stage,
            attempt=self.config.attempt,
            start_ns=started_ns,
            end_ns=ended_ns,
            tokens=tokens,
            loss=loss_total / cfg.microbatches,
            model_flops=self.setup.flops_per_token * job_tokens / layout.world_size,
            peak_memory_bytes=self.budget.peak_bytes(),
            layers=layers,
            tokens_per_expert=experts.tolist(),
            tokens_per_local_expert=[traffic.tokens_per_local_expert.get(i, []) for i in layers],
            dispatched_tokens=[traffic.dispatched_tokens.get(i, 0) for i in layers],
            received_tokens=[traffic.received_tokens.get(i, 0) for i in layers],
            compute_s=max(step_s - times.total_s, 0.0),
            all_to_all_s=times.all_to_all_s,
            pipeline_s=times.pipeline_s,
            all_reduce_s=times.all_reduce_s,
            wait_s=times.wait_s,
            microbatch_s=microbatch_s,
            all_to_all_bytes=times.all_to_all_bytes,
            pipeline_bytes=times.pipeline_bytes,
            all_reduce_bytes=times.all_reduce_bytes,
            samples=mine,
            policy_decisions=decisions,
            decide_s=decide_s,
        )
        return result, TrainState(state.step + 1, next_sample)

    def _microbatches(self, mine: list[int]) -> tuple[list[float], Tensor, list[dict], float]:
        """This rank's micro-batches through its stage, 1F1B; their main losses (last stage),
        tokens per expert ``[stage layers, E]``, the policy's decisions and deciding time."""
        cfg, layout, comm, plan = self.config.trainer, self.layout, self.comm, self.plan
        setup, recipe = self.setup, self.setup.recipe
        prev_rank = self.rank - layout.dp * layout.ep  # the same replica, one stage back
        next_rank = self.rank + layout.dp * layout.ep
        num_layers = self.model.config.num_layers
        order = one_f_one_b(layout.pp, self.coords.stage, len(mine))
        alive: dict[int, tuple[Tensor | None, Tensor, Tensor]] = {}
        sends: list[Any] = []
        losses: list[float] = []
        experts = torch.zeros((len(plan.layers), self.model.config.num_experts), dtype=torch.long)
        decisions: list[dict] = []
        decide_s = 0.0
        self.optimizer.zero_grad(set_to_none=True)
        with self.budget.track():
            for phase, mb in order:
                if phase == "forward":
                    comm.counting = True
                    x, y = setup.batch(mine[mb])
                    setup.skew.set_microbatch(mine[mb])
                    self.policy.begin_microbatch()
                    x_in = None
                    if not plan.first:
                        x_in = comm.recv(self.activation, prev_rank).requires_grad_()
                    out = stage_forward(self.model, plan, x, y, x_in)
                    # This stage's share of the load-balancing loss (its layers of the mean
                    # over all layers), divided as every micro-batch's loss is.
                    aux = recipe.aux_loss_weight * out.aux_sum / num_layers / cfg.microbatches
                    if plan.last:
                        assert out.loss is not None
                        objective = out.loss
                        if out.mtp_loss is not None:
                            objective = objective + recipe.mtp_loss_weight * out.mtp_loss
                        alive[mb] = (x_in, out.hidden, objective / cfg.microbatches + aux)
                        losses.append(float(out.loss.detach()))
                    else:
                        sends.append(comm.send(out.hidden.detach(), next_rank))
                        alive[mb] = (x_in, out.hidden, aux)
                    experts += out.tokens_per_expert.cpu()
                    mb_decisions, mb_decide_s = self.policy.take_decisions()
                    decisions += [{"microbatch": mb, **d} for d in mb_decisions]
                    decide_s += mb_decide_s
                else:
                    comm.counting = False
                    x_in, hidden, objective = alive.pop(mb)
                    if plan.last:
                        objective.backward()
                    else:
                        grad = comm.recv(self.activation, next_rank)
                        torch.autograd.backward(
                            [hidden, objective], [grad, torch.ones_like(objective)]
                        )
                    if x_in is not None:
                        assert x_in.grad is not None
                        sends.append(comm.send(x_in.grad, prev_rank))
        comm.counting = True
        comm.wait_sends(sends)
        return losses, experts, decisions, decide_s

    # -- gradients --------------------------------------------------------------------------

    def _sum_gradients(self) -> None:
        """Sum each weight's gradient over the ranks that hold it: dense weights over the
        stage's data ranks, experts over their replicas, the embedding over its copies."""
        layout, rank = self.layout, self.rank
        self.comm.barrier()  # where the ranks meet: a straggler's lead shows as others' wait
        self._sum(self.dense_params, layout.dense_group(rank))
        self._sum(self.expert_params, layout.expert_data_group(rank))
        if self.tied:
            self._sum(
                list(self.model.model.embed_tokens.parameters()), layout.embedding_group(rank)
            )

    def _sum(self, params: list[nn.Parameter], members: list[int]) -> None:
        if len(members) < 2 or not params:
            return
        # One buffer per group, each gradient followed by whether the rank had one: an
        # expert no token reached has none on that rank, and AdamW must skip it only if no
        # replica had one (as the single process skips it).
        dtype = params[0].dtype
        parts = [p.grad.flatten() if p.grad is not None else p.new_zeros(p.numel()) for p in params]
        present = torch.tensor(
            [p.grad is not None for p in params], dtype=dtype, device=params[0].device
        )
        buffer = torch.cat([*parts, present])
        self.comm.all_reduce_sum(buffer, members)
        offset = 0
        for i, p in enumerate(params):
            n = p.numel()
            if float(buffer[-len(params) + i]) > 0:
                p.grad = buffer[offset : offset + n].view_as(p).clone()
            offset += n

    def _global_norm_and_loss(self, loss_sum: float) -> tuple[float, float]:
        """The whole model's gradient norm (each weight counted once, however many ranks
        hold it) and the sum of every micro-batch's loss, in one all-reduce."""
        layout = self.layout
        sq = torch.zeros((), dtype=torch.float64)
        for p in self.dense_params:
            if p.grad is not None and id(p) not in self._norm_skip:
                sq += p.grad.double().pow(2).sum().cpu() / layout.data_width
        for p in self.expert_params:
            if p.grad is not None:
                sq += p.grad.double().pow(2).sum().cpu() / layout.dp
        buffer = torch.stack([sq, torch.tensor(loss_sum, dtype=torch.float64)])
        self.comm.all_reduce_sum(buffer, list(range(layout.world_size)))
        return math.sqrt(float(buffer[0])), float(buffer[1])
