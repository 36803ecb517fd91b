"""Simulated training iterations: per-stage times from a roofline, the 1F1B timeline,
activation memory per stage as micro-batches stack, OOMs, restarts and MFU.

Per micro-batch and stage (``p x v`` model chunks of about ``L / (p v)`` layers, the dense
ones first; with ``virtual_stages`` v > 1 rank r holds chunks r, p + r, ... and runs
Megatron's interleaved 1F1B; ``uneven_layers`` gives the first chunks one layer more):

- compute: forward FLOPs of this rank (attention, router and shared experts / tensor; the
  routed experts of the hottest expert-parallel rank, which the all-to-all waits for) over
  ``peak x gemm_efficiency`` (the blocks' GEMMs at FP8's when the recipe says so:
  stages.py); backward twice the forward; recompute adds what it re-runs.
- communication: per MoE layer, dispatch and combine all-to-alls forward and backward of
  the hottest rank's slots, over the scale-up and scale-out links as the dispatcher uses
  them (comm.py); tensor parallel all-gather / reduce-scatter (2 per layer, (t - 1) / t of
  the tokens' bytes); one hop between stages. The recipe (recipe.py) may hide the
  all-to-all under a paired micro-batch's compute (overlap.py) and the tensor-parallel
  transfers under their GEMMs; the data-parallel reduction is hidden, overlapped with the
  last backward and first forward, or exposed, once per iteration; the optimizer step is
  charged at HBM speed (16 B/param).
- memory: weights bf16 + fp32 gradients per rank, fp32 master weights and two Adam moments
  sharded over data parallel (the distributed optimizer; with ``fsdp`` weights and
  gradients too, plus the stage's weights gathered for the iteration), plus the saved
  activations (activations.py) alive under this stage's 1F1B order, plus a working set
  (one layer's expert buffers on the hottest rank, forward and backward).

Policies: keep-all, full-recompute, selective (experts recomputed), adaptive (after the
router: keep while the stage's predicted peak fits under ``memory x (1 - margin)``, else the
cheaper of recomputing or offloading the fewest expert slots that fit, room reserved for
the forwards still to come before the next backward: adaptive.py), adaptive-dual (adaptive,
its extra work then moved into the stage's bubbles and under its transfers: dual_batch.py).
Skews: the reference trainer's none / calm / spiky drawn per micro-batch and layer, or
replayed from its tokens-per-expert files. An OOM is any stage of any expert group over its
memory. All figures are simulated and say so where shown.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from moeperf.targets.cluster_sim import routing
from moeperf.targets.cluster_sim.activations import ActivationLayout, PolicyName, megatron_layout
from moeperf.targets.cluster_sim.adaptive import ADAPTIVE_MARGIN, adaptive_plan
from moeperf.targets.cluster_sim.comm import a2a_seconds_per_slot
from moeperf.targets.cluster_sim.config import ClusterSimConfigError, SimConfig
from moeperf.targets.cluster_sim.dual_batch import DualBatchPlan, plan_dual_batch
from moeperf.targets.cluster_sim.flops import training_flops_per_token
from moeperf.targets.cluster_sim.overlap import hide_transfers
from moeperf.targets.cluster_sim.pipeline import IterationTimeline, peak_saved_bytes
from moeperf.targets.cluster_sim.ranks import by_rank, rank_orders, rank_timeline
from moeperf.targets.cluster_sim.stages import data_parallel_step_s, op_times
from moeperf.targets.cluster_sim.stages import stages as chunk_stages

SimPolicy = Literal["keep-all", "full-recompute", "selective", "adaptive", "adaptive-dual"]
SIM_POLICIES: tuple[SimPolicy, ...] = (
    "keep-all", "full-recompute", "selective", "adaptive", "adaptive-dual",
)  # fmt: skip
OPTIMIZER_BYTES_PER_PARAM_STEP = 16  # Adam: read/write fp32 master, 2 moments, bf16 copy


@dataclass(frozen=True)
class JobSpec:
    """What the simulated job does besides its layout: policy, skew, checkpoints."""

    policy: SimPolicy = "keep-all"
    skew: routing.SkewName = "calm"
    iterations: int = 100
    seed: int = 0
    checkpoint_every: int = 50
    checkpoint_write_s: float = 15.0  # seed 003: checkpoint writes cut to ~15 s
    restart_s: float = 300.0  # seed 000: restart + reload "hundreds of seconds"
    # skew "replay": tokens per expert [lines, layers, E] (targets.training.skew's files)
    replay_counts: np.ndarray | None = None


@dataclass(frozen=True)
class IterationResult:
    iteration: int
    time_s: float
    mfu: float
    oom: bool
    spike: bool  # a micro-batch of this iteration spiked (spiky skew)
    peak_memory_bytes: np.ndarray  # [p] the highest rank of each stage
    idle_fraction: float  # measured bubble of the timeline
    recompute_s: float  # extra seconds the policy added (recompute or offload), all stages
    moved_s: float = 0.0  # of those, seconds dual-batch interleaving ran in bubbles
    decision_s: float = 0.0  # wall time of the dual-batch plan (host seconds, measured)


@dataclass
class JobResult:
    config: SimConfig
    job: JobSpec
    tokens_per_iteration: float
    model_flops_per_iteration: float
    iterations: list[IterationResult] = field(default_factory=list)
    lost_s: float = 0.0  # OOM restarts: work since the last checkpoint + restart
    checkpoint_s: float = 0.0
    ooms: int = 0
    lost_per_oom_s: dict[int, float] = field(default_factory=dict)  # iteration -> lost_s

    @property
    def wall_s(self) -> float:
        return sum(r.time_s for r in self.iterations if not r.oom) + self.lost_s + self.checkpoint_s

    @property
    def completed(self) -> int:
        return sum(not r.oom for r in self.iterations)

    @property
    def oom_rate(self) -> float:
        return self.ooms / max(len(self.iterations), 1)

    @property
    def effective_tokens_per_s(self) -> float:
        return self.completed * self.tokens_per_iteration / self.wall_s if self.wall_s else 0.0

    @property
    def mfu_mean(self) -> float:
        ok = [r.mfu for r in self.iterations if not r.oom]
        return float(np.mean(ok)) if ok else 0.0

    @property
    def effective_mfu(self) -> float:
        """Model FLOPs of completed iterations over the whole wall time, restarts included."""
        peak = self.config.cluster.peak_flops_per_s * self.config.cluster.devices
        return self.completed * self.model_flops_per_iteration / (self.wall_s * peak)


def simulate(cfg: SimConfig, job: JobSpec, layout: ActivationLayout | None = None) -> JobResult:
    """``job.iterations`` iterations of ``cfg``; the layout defaults to Megatron's."""
    cfg.validate()
    if job.policy not in SIM_POLICIES:
        raise ClusterSimConfigError(
            f"unknown policy {job.policy!r}; valid: {', '.join(SIM_POLICIES)}"
        )
    m, par, cl = cfg.model, cfg.parallel, cfg.cluster
    layout = layout or megatron_layout(m, par.tensor)
    # Per model chunk ("stage" below: p x v of them, chunk g on rank g mod p) until the
    # policies have their bytes and times, then per pipeline rank, its v chunks' micro-
    # batches side by side (``by_rank``): the ranks are what run and hold memory.
    p, v, mb = cfg.stages, par.virtual_stages, cfg.microbatches
    ranks = par.pipeline
    stages = chunk_stages(cfg)
    tokens = cfg.micro_batch * m.seq_len / par.context  # per rank (SP splits activations)
    moe_tokens = cfg.moe_tokens_per_rank  # what this rank dispatches
    groups = cfg.expert_data_parallel
    rng = np.random.default_rng(job.seed)
    most = max(st.layers for st in stages)  # uneven chunks: the missing layers masked out
    draws = routing.draw(rng, (job.iterations, groups, p, mb), most,
                         m.num_experts, m.top_k, job.skew)  # fmt: skip
    if job.skew == "replay":
        share = routing.replay_share(_replay_counts(job, m.num_experts), par.expert,
                                     (job.iterations, groups, p, mb), most)  # fmt: skip
    else:
        share = routing.hottest_share(draws.ratio, m.num_experts, par.expert)  # [I,G,p,m,Ls]
    group_slots = par.expert * moe_tokens * m.top_k
    moe_mask = np.array([[st.dense <= i < st.layers for i in range(most)] for st in stages])
    hot_slots = share * group_slots * moe_mask[None, None, :, None, :]  # [I,G,p,m,Ls]
    slots_sum = hot_slots.sum(-1)  # [I,G,p,m]
    own_slots = moe_tokens * m.top_k * moe_mask.sum(-1)  # [p]

    e = m.bytes_per_element
    times = op_times(cfg, stages, tokens)
    expert_fwd = slots_sum * times.expert_fwd_per_slot  # [I,G,p,m]
    a2a_f = slots_sum * a2a_seconds_per_slot(cfg, forward=True)
    a2a_b = slots_sum * a2a_seconds_per_slot(cfg, forward=False)
    hop_s = (
        tokens * m.hidden_size * e / par.tensor / (cl.scale_out_bytes_per_s * cl.comm_efficiency)
    )
    compute_f = times.fixed_fwd[:, None] + expert_fwd
    compute_b = 2 * compute_f
    static = np.array([st.static_bytes for st in stages]).reshape(v, ranks).sum(axis=0)
    layer_hot_max = hot_slots.max(-1)
    working = 2 * layer_hot_max * (m.hidden_size + 3 * m.expert_hidden_size) * e  # [I,G,p,m]
    working_peak = by_rank(working, ranks, v).max(-1)  # [I,G,ranks]
    orders = rank_orders(ranks, v, mb, cfg.recipe.a2a_overlap)
    # The adaptive policy starts from keep-all and drops what does not fit (below).
    adaptive = job.policy in ("adaptive", "adaptive-dual")
    base: PolicyName = "keep-all" if adaptive else job.policy  # type: ignore[assignment]
    saved = np.zeros_like(slots_sum)
    extra = np.zeros_like(slots_sum)
    limit = np.full_like(working_peak, np.inf)  # activation bytes a stage may hold (adaptive)
    for s, st in enumerate(stages):
        saved[:, :, s, :] = layout.microbatch_bytes(
            base, tokens, st.layers, slots_sum[:, :, s, :], own_slots[s],
            dense_layers=st.dense, head=st.head,
        )  # fmt: skip
    if job.policy == "full-recompute":
        extra = times.fixed_fwd[None, None, :, None] + expert_fwd + a2a_f
    elif job.policy == "selective":
        extra = expert_fwd.copy()
    each = np.ones((p, mb))
    side_f, side_b = (
        by_rank(a[:, None] * each, ranks, v) for a in (times.side_fwd, times.side_bwd)
    )
    compute_f, compute_b, a2a_f, a2a_b, saved, extra = (
        by_rank(a, ranks, v) for a in (compute_f, compute_b, a2a_f, a2a_b, saved, extra)
    )
    if cfg.recipe.a2a_overlap:
        a2a_f, a2a_b = hide_transfers(compute_f, compute_b, a2a_f, a2a_b, orders)
    forward = compute_f + a2a_f + side_f
    backward = compute_b + a2a_b + side_b
    # Seconds of each op the stage's compute waits on the network, in every group: what
    # dual-batch interleaving can run another micro-batch's recompute under.
    comm = (a2a_f + side_f).min(axis=1)  # [I,ranks,v m]
    kept = saved  # the base policy's bytes (adaptive: keep-all's, restored where it drops)
    if adaptive:
        limit = cl.memory_bytes * (1 - ADAPTIVE_MARGIN) - static[None, None, :] - working_peak
        full = np.array([layout.microbatch_bytes("full-recompute", tokens, st.layers, 0.0, 0.0,
                                                 head=st.head) for st in stages])  # fmt: skip
        saved, extra = adaptive_plan(
            saved, by_rank(slots_sum, ranks, v), limit, orders, layout, times.expert_fwd_per_slot,
            cl.host_link_bytes_per_s, by_rank(full[:, None] * each, ranks, v),
            by_rank(times.fixed_fwd[:, None] * each, ranks, v), reserve=True,
        )  # fmt: skip
    plain_backward = backward
    backward = backward + extra
    peaks = peak_saved_bytes(saved, orders) + static[None, None, :] + working_peak  # [I,G,p]
    stage_peak = peaks.max(axis=1)  # [I,p]
    oom = (stage_peak > cl.memory_bytes).any(axis=1)

    fwd_w, bwd_w = forward.max(axis=1), backward.max(axis=1)  # [I,p,m]: the slowest group
    rank_params = np.array([st.params for st in stages]).reshape(v, ranks).sum(axis=0)
    optimizer_s = float(rank_params.max()) * OPTIMIZER_BYTES_PER_PARAM_STEP
    optimizer_s /= cl.hbm_bytes_per_s
    # The data-parallel reduction, under the last backward and first forward it may use
    # (its busiest rank's; the slowest group's compute, the first iteration's: reductions
    # move weights, which do not depend on routing).
    last_backward_s = (
        float(compute_b[0].max(axis=0)[:, mb - 1 :: mb].sum(axis=-1).min()) if mb else 0.0
    )
    first_forward_s = float(compute_f[0].max(axis=0)[:, ::mb].sum(axis=-1).min()) if mb else 0.0
    optimizer_s += data_parallel_step_s(cfg, stages, last_backward_s, first_forward_s)
    tokens_iter = float(cfg.global_batch * m.seq_len)
    flops_iter = training_flops_per_token(m) * tokens_iter
    result = JobResult(cfg, job, tokens_iter, flops_iter)
    since_checkpoint = 0.0
    for i in range(job.iterations):
        timeline = rank_timeline(fwd_w[i], bwd_w[i], hop_s, orders, v)
        moved_s = decision_s = 0.0
        if job.policy == "adaptive-dual" and extra[i].any():
            dual = _dual_batch(timeline, fwd_w[i], plain_backward[i], comm[i], extra[i], kept[i],
                               saved[i], limit[i], orders, hop_s, v)  # fmt: skip
            timeline, plan = dual
            moved_s, decision_s = float(plan.moved_s.sum()), plan.decision_s
            held = (plan.held_bytes + static[None, :] + working_peak[i]).max(axis=0)
            stage_peak[i] = np.maximum(stage_peak[i], held)
            oom[i] = oom[i] or bool((stage_peak[i] > cl.memory_bytes).any())
        time_s = timeline.makespan_s + optimizer_s
        mfu = flops_iter / (time_s * cl.peak_flops_per_s * cl.devices)
        result.iterations.append(IterationResult(
            i, time_s, mfu, bool(oom[i]), bool(draws.spike[i].any()), stage_peak[i],
            timeline.idle_fraction, float(extra[i].max(axis=0).sum()), moved_s, decision_s,
        ))  # fmt: skip
        if oom[i]:
            # The crash throws away this iteration and the work since the last checkpoint:
            # the job restarts, reloads, replays that work (counted once more here; its
            # first run is in the completed iterations' time) and skips the crashing batch.
            # The replayed work is again unsaved until the next checkpoint.
            result.ooms += 1
            result.lost_per_oom_s[i] = since_checkpoint + time_s + job.restart_s
            result.lost_s += result.lost_per_oom_s[i]
            continue
        since_checkpoint += time_s
        if (i + 1) % job.checkpoint_every == 0:
            result.checkpoint_s += job.checkpoint_write_s
            since_checkpoint = 0.0
    return result


def _dual_batch(
    timeline: IterationTimeline,
    forward_s: np.ndarray,
    plain_backward_s: np.ndarray,
    comm_s: np.ndarray,
    extra_s: np.ndarray,
    kept_bytes: np.ndarray,
    saved_bytes: np.ndarray,
    limit_bytes: np.ndarray,
    orders: list[list[tuple[bool, int]]],
    hop_s: float,
    chunks: int,
) -> tuple[IterationTimeline, DualBatchPlan]:
    """One iteration's adaptive extra work moved into its bubbles and re-timed
    (``comm_s [p, m]``: each op's transfer seconds, forward and backward alike). Per
    ``[G, p, m]`` (groups): backward without and the extra with the policy, the bytes
    kept by keep-all and by the policy, and ``limit_bytes [G, p]``; the plan is made on
    the slowest group's timeline (the one the iteration waits for) and must fit every
    group's memory; each group then runs what it cannot move."""
    backward_s = (plain_backward_s + extra_s).max(axis=0)
    plan = plan_dual_batch(timeline, forward_s, backward_s, orders, comm_s, comm_s, extra_s,
                           kept_bytes - saved_bytes, saved_bytes, limit_bytes)  # fmt: skip
    left_s = np.maximum(extra_s - plan.moved_s[None], 0.0)
    backward_s = (plain_backward_s + left_s).max(axis=0)
    return rank_timeline(forward_s, backward_s, hop_s, orders, chunks, plan.fill_s), plan


def _replay_counts(job: JobSpec, experts: int) -> np.ndarray:
    if job.replay_counts is None:
        raise ClusterSimConfigError("skew 'replay' needs replay_counts (a replay file's loads)")
    counts = np.asarray(job.replay_counts, dtype=np.float64)
    if counts.ndim != 3 or counts.shape[-1] != experts:
        raise ClusterSimConfigError(
            f"replay loads of shape {counts.shape} do not fit the model: expected "
            f"[micro-batches, layers, {experts} experts]"
        )
    return counts
