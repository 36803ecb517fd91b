"""The simulator configured as the reference trainer, to measure its error on this machine.

The reference trainer (targets.training) is one process that runs every layer and every
expert, in the order stage ``stage`` of a ``pipeline_stages``-stage 1F1B pipeline would,
and counts memory as the hottest of ``expert_parallel`` ranks. Configured the same way, the
simulator's parts predict each step without running it:

- routing: the scenario's own skew profile (targets.training.skew), replayed per sample: the
  hottest rank's share of each layer's token-slots (the trainer's HottestExpertRank), from
  the targets its router is biased to (the realized loads differ from them a little);
  ``none`` (the model's own routing, unknown without running it) is taken as balanced.
- memory: static bytes + the largest prefix sum of each micro-batch's saved bytes in the
  stage's 1F1B order (``reference_layout``, the ledger's own terms) + the policy's working
  set; an OOM when that crosses the budget.
- time: a roofline of one device: model FLOPs of the step over ``peak x efficiency``, plus
  what the policy runs again (recompute FLOPs at the same rate; offload bytes at the host
  copy speed). One process runs everything in turn, so there is no bubble and no link.
- recovery: the trainer's own (trainer.py): a crashed step's micro-batches are skipped, the
  job restores the last checkpoint and replays the steps since it.

What comes from the machine (``ReferenceCalibration``): the measured peak FLOP/s, the
static bytes, each policy's working set (the trainer's profiler calibration on one
micro-batch), the host copy speed, and one fitted number, the efficiency, from keep-all
steps under calm routing with no budget (``fit_efficiency``). Everything else is predicted.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

import numpy as np

from moeperf.targets.cluster_sim.activations import PolicyName, reference_layout
from moeperf.targets.cluster_sim.adaptive import ADAPTIVE_MARGIN, adaptive_plan
from moeperf.targets.cluster_sim.config import SimModel
from moeperf.targets.cluster_sim.flops import (
    attention_macs_per_token,
    routed_expert_macs_per_slot,
    training_flops_per_token,
)
from moeperf.targets.cluster_sim.pipeline import peak_saved_bytes, stage_orders
from moeperf.targets.training.flops import FLOPS_PER_MAC
from moeperf.targets.training.setup import TrainerConfig
from moeperf.targets.training.skew import RoutingShape, SkewProfile

_STATIC: dict[str, PolicyName] = {
    "keep-all": "keep-all", "full-recompute": "full-recompute", "selective": "selective"
}  # fmt: skip


@dataclass(frozen=True)
class ReferenceCalibration:
    """What the reference trainer measured on this machine, and the one fitted factor."""

    peak_flops_per_s: float
    efficiency: float  # achieved / peak FLOP/s of a keep-all step (fit_efficiency)
    static_bytes: int  # weights, gradients, AdamW state
    working_set_bytes: int  # this policy's transient bytes of one micro-batch (profiler)
    host_copy_s_per_byte: float  # out to host memory and back, per byte


@dataclass(frozen=True)
class PredictedStep:
    step: int
    samples: tuple[int, ...]
    time_s: float
    peak_bytes: int
    oom: bool
    replay: bool  # a step run again after a restart


@dataclass(frozen=True)
class ReferencePrediction:
    steps: tuple[PredictedStep, ...]  # every attempt, in the order the trainer runs them
    stopped: bool  # more OOMs than max_restarts: the trainer gives up

    @property
    def completed(self) -> list[PredictedStep]:
        return [s for s in self.steps if not s.oom]

    @property
    def ooms(self) -> int:
        return sum(s.oom for s in self.steps)


def step_flops(cfg: TrainerConfig) -> float:
    """Model FLOPs of one optimizer step (the trainer's MFU numerator)."""
    m = _sim_model(cfg)
    return training_flops_per_token(m) * cfg.microbatches * cfg.micro_batch_size * cfg.seq_len


def fit_efficiency(
    cfg: TrainerConfig, keep_all_step_s: list[float], peak_flops_per_s: float
) -> float:
    """Achieved over peak FLOP/s of keep-all steps (median step time: one slow step on a
    busy host should not set it)."""
    if not keep_all_step_s or peak_flops_per_s <= 0:
        raise ValueError("fit_efficiency needs measured step times and a positive peak")
    return step_flops(cfg) / (statistics.median(keep_all_step_s) * peak_flops_per_s)


def predict(
    cfg: TrainerConfig,
    calibration: ReferenceCalibration,
    profile: SkewProfile,
    budget_bytes: int | None,
) -> ReferencePrediction:
    """Every step the trainer would attempt for ``cfg`` (its policy, skew and steps)."""
    m = _sim_model(cfg)
    model = _Model(cfg, m, calibration, profile)
    limit = budget_bytes if budget_bytes is not None else float("inf")
    steps: list[PredictedStep] = []
    skipped: set[int] = set()
    step, next_sample = 0, 0
    checkpoint = (0, 0)  # (step, next sample) of the last checkpoint
    high_water, restarts = 0, 0
    while step < cfg.steps:
        samples, after = _samples_for_step(next_sample, cfg.microbatches, skipped)
        time_s, peak = model.step(samples, limit)
        oom = peak > limit
        steps.append(PredictedStep(step, tuple(samples), time_s, int(peak), oom, step < high_water))
        if oom:
            restarts += 1
            if restarts > cfg.max_restarts:
                return ReferencePrediction(tuple(steps), stopped=True)
            skipped.update(samples)
            step, next_sample = checkpoint
            continue
        step, next_sample = step + 1, after
        high_water = max(high_water, step)
        if step % cfg.checkpoint_every == 0:
            checkpoint = (step, next_sample)
    return ReferencePrediction(tuple(steps), stopped=False)


def _sim_model(cfg: TrainerConfig) -> SimModel:
    model = cfg.model if cfg.mtp else replace(cfg.model, mtp_depth=0)
    return SimModel.of(model, cfg.seq_len, bytes_per_element=4 if cfg.dtype == "float32" else 2)


def _samples_for_step(
    next_sample: int, microbatches: int, skipped: set[int]
) -> tuple[list[int], int]:
    samples: list[int] = []
    j = next_sample
    while len(samples) < microbatches:
        if j not in skipped:
            samples.append(j)
        j += 1
    return samples, j


class _Model:
    """One step's time and peak for given samples: the module's recipe."""

    def __init__(
        self, cfg: TrainerConfig, m: SimModel, cal: ReferenceCalibration, profile: SkewProfile
    ):
        self.cfg, self.m, self.cal, self.profile = cfg, m, cal, profile
        self.layout = reference_layout(m)
        self.shape = RoutingShape(cfg.model.num_layers, m.num_experts, m.top_k)
        self.tokens = cfg.micro_batch_size * cfg.seq_len
        self.blocks = m.num_layers + m.mtp_depth  # the layers the trainer's policy sees
        self.all_slots = self.tokens * m.top_k * self.blocks
        self.order = stage_orders(cfg.pipeline_stages, cfg.microbatches)[cfg.stage]
        rate = cal.peak_flops_per_s * cal.efficiency
        self.step_s = step_flops(cfg) / rate
        self.slot_forward_s = FLOPS_PER_MAC * routed_expert_macs_per_slot(m) / rate
        # A layer's forward without its routed experts: attention and router.
        layer_macs = attention_macs_per_token(m) + m.hidden_size * m.num_experts
        self.layers_forward_s = FLOPS_PER_MAC * self.tokens * self.blocks * layer_macs / rate

    def hottest_slots(self, sample: int) -> float:
        """Token-slots the hottest rank's experts receive, summed over the layers."""
        ep = self.cfg.expert_parallel
        target = self.profile.target(sample, self.shape)
        if target is None:
            share = np.full(self.shape.num_layers, 1.0 / ep)
        else:
            fraction = target.load_fraction.numpy()
            share = fraction.reshape(self.shape.num_layers, ep, -1).sum(-1).max(-1)
        # MTP blocks route like the last layer would: take the mean share for them.
        mtp = self.m.mtp_depth * float(share.mean())
        return (float(share.sum()) + mtp) * self.tokens * self.m.top_k

    def step(self, samples: list[int], limit: float) -> tuple[float, float]:
        policy = self.cfg.policy
        slots = np.array([self.hottest_slots(j) for j in samples])
        base: PolicyName = "keep-all" if policy == "adaptive" else _STATIC[policy]
        saved = np.array([
            self.layout.microbatch_bytes(base, self.tokens, self.blocks, s, self.all_slots)
            for s in slots
        ])  # fmt: skip
        extra = np.zeros(len(saved))
        if policy == "full-recompute":
            extra += self.layers_forward_s + self.all_slots * self.slot_forward_s
        elif policy == "selective":
            extra += slots * self.slot_forward_s
        elif policy == "adaptive":
            room = limit * (1 - ADAPTIVE_MARGIN) - self.cal.static_bytes
            room -= self.cal.working_set_bytes
            full = self.layout.microbatch_bytes("full-recompute", self.tokens, self.blocks, 0, 0)
            other_slots_s = (self.all_slots - slots) * self.slot_forward_s
            saved4, extra4 = adaptive_plan(
                saved[None, None, None, :], slots[None, None, None, :],
                np.full((1, 1, 1), room), [self.order], self.layout, self.slot_forward_s,
                2.0 / self.cal.host_copy_s_per_byte, np.array([full]),
                np.array([self.layers_forward_s]) + other_slots_s.mean(),
            )  # fmt: skip
            saved, extra = saved4[0, 0, 0], extra4[0, 0, 0]
        peak_saved = peak_saved_bytes(saved[None, :], [self.order])[0]
        peak = self.cal.static_bytes + float(peak_saved) + self.cal.working_set_bytes
        return self.step_s + float(extra.sum()), peak
