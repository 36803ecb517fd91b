"""What each model chunk of a simulated job holds, and how long its ops take.

Per chunk ("stage": pipeline x virtual stages of them): its layers (the dense ones first),
the weights one rank holds, its static memory (weights, gradients, optimizer state), and
per micro-batch the seconds of its forward's GEMMs and attention and its tensor-parallel
transfers, and what the data-parallel reduction costs once per iteration. Backward is
twice the forward's compute, as everywhere in this simulator.

Rates: the transformer blocks' GEMMs at the precision's peak x efficiency (``Cluster``'s
BF16 or FP8 figures, recipe.py), attention's score and value products, the router and
the output head at BF16's; links at their peak x ``comm_efficiency``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moeperf.targets.cluster_sim.config import SimConfig
from moeperf.targets.cluster_sim.flops import (
    attention_projection_macs_per_token,
    attention_score_macs_per_token,
    dense_macs_per_token,
    head_macs_per_token,
    routed_expert_macs_per_slot,
)


@dataclass(frozen=True)
class Stage:
    layers: int
    dense: int
    head: bool
    first: bool
    static_bytes: float
    plain_params: float  # weights on one rank outside the routed experts
    expert_params: float  # routed experts' weights on one rank

    @property
    def params(self) -> float:
        return self.plain_params + self.expert_params


def stages(cfg: SimConfig) -> list[Stage]:
    m, par = cfg.model, cfg.parallel
    chunks = cfg.stages  # pipeline x virtual stages, in pipeline order (Megatron's chunks)
    # As even as possible, the first chunks one layer more (all equal when they divide).
    counts = [len(part) for part in np.array_split(np.arange(m.num_layers), chunks)]
    c, f, e = m.hidden_size, m.expert_hidden_size, m.bytes_per_element
    attention = m.attention_params() / par.tensor
    shared = (m.shared_experts * 3 * c * f + c * m.num_experts) / par.tensor
    routed = m.num_experts // par.expert * 3 * c * f / par.expert_tensor
    dense = 3 * c * m.dense_hidden_size / par.tensor
    dp, expert_dp = cfg.data_parallel, cfg.expert_data_parallel
    out = []
    for s, per in enumerate(counts):
        d = int(np.clip(m.dense_layers - sum(counts[:s]), 0, per))
        head, first = s == chunks - 1, s == 0
        plain = per * attention + (per - d) * shared + d * dense
        plain += (m.vocab_size * c / par.tensor) * (int(head) + int(first))
        if head:
            plain += m.mtp_depth * (attention + shared + 2 * c * c / par.tensor)
        experts = (per - d + (m.mtp_depth if head else 0)) * routed
        weights_and_grads = (plain + experts) * (e + 4)
        if par.fsdp:  # sharded, plus the stage's weights gathered for the iteration
            # (gathered once and kept across micro-batches, as pipelined FSDP runs;
            # what is not sharded, a group of one, needs no gathered copy)
            gathered = (plain * (dp > 1) + experts * (expert_dp > 1)) * e
            weights_and_grads = (plain / dp + experts / expert_dp) * (e + 4) + gathered
        optimizer = 12 * (plain / dp + experts / expert_dp)
        static = weights_and_grads + optimizer
        out.append(Stage(per, d, head, first, static, plain, experts))
    return out


@dataclass(frozen=True)
class OpTimes:
    """Seconds per stage ``[p]`` of one micro-batch's forward (backward: twice the compute,
    its own transfers), and per routed slot on the hottest rank."""

    fixed_fwd: np.ndarray  # compute other than the routed experts
    expert_fwd_per_slot: float
    # Tensor-parallel all-gathers and reduce-scatters, as far as they are not under the
    # op's own GEMMs (tp_comm_overlap).
    side_fwd: np.ndarray
    side_bwd: np.ndarray


def _rates(cfg: SimConfig) -> tuple[float, float]:
    """FLOP/s of the blocks' GEMMs (the recipe's precision) and of BF16 work."""
    cl = cfg.cluster
    bf16 = cl.peak_flops_per_s * cl.gemm_efficiency
    if cfg.recipe.precision == "fp8":
        return cl.fp8_peak_flops_per_s * cl.fp8_gemm_efficiency, bf16
    return bf16, bf16


def op_times(cfg: SimConfig, chunks: list[Stage], tokens: float) -> OpTimes:
    """Per-stage op times of ``cfg`` for ``tokens`` per rank and micro-batch."""
    m, par, cl = cfg.model, cfg.parallel, cfg.cluster
    gemm, bf16 = _rates(cfg)
    t, e = par.tensor, m.bytes_per_element
    gemm_macs, other_macs = [], []
    for st in chunks:
        moe = st.layers - st.dense
        shared = m.shared_experts * routed_expert_macs_per_slot(m)
        gemm_macs.append(st.layers * attention_projection_macs_per_token(m)
                         + st.dense * dense_macs_per_token(m) + moe * shared)  # fmt: skip
        other = st.layers * attention_score_macs_per_token(m) + moe * m.hidden_size * m.num_experts
        other_macs.append(other + (head_macs_per_token(m) if st.head else 0.0))
    hide = 2 * tokens * np.array(gemm_macs) / t / gemm
    fixed = hide + 2 * tokens * np.array(other_macs) / t / bf16
    per_slot = 2 * routed_expert_macs_per_slot(m) / gemm / par.expert_tensor
    layers = np.array([st.layers for st in chunks], dtype=float)
    tp = np.zeros_like(layers)
    if t > 1:  # all-gather before and reduce-scatter after attention, per layer
        tp_bytes = tokens * m.hidden_size * e * (t - 1) / t
        tp = layers * 2 * tp_bytes / (cl.scale_up_bytes_per_s * cl.comm_efficiency)
    sides = []
    for under in (1, 2):  # backward: twice the forward's compute to run under
        sides.append(np.maximum(tp - under * hide, 0.0) if cfg.recipe.tp_comm_overlap else tp)
    return OpTimes(fixed, per_slot, sides[0], sides[1])


def _dp_gather_bytes(cfg: SimConfig, st: Stage) -> float:
    """Bytes a rank receives to gather one stage's weights (or sends to reduce its
    gradients): the other data-parallel ranks' shards, the experts' over expert-data."""
    dp, edp, e = cfg.data_parallel, cfg.expert_data_parallel, cfg.model.bytes_per_element
    return e * (st.plain_params * (dp - 1) / dp + st.expert_params * (edp - 1) / edp)


def _dp_bytes_per_s(cfg: SimConfig) -> float:
    """The data-parallel group's link: scale-up when its ranks (strided by tensor x
    context) fit in one domain, else scale-out."""
    par, cl = cfg.parallel, cfg.cluster
    span = cfg.data_parallel * par.tensor * par.context
    link = cl.scale_up_bytes_per_s if span <= cl.scale_up_domain else cl.scale_out_bytes_per_s
    return link * cl.comm_efficiency


def data_parallel_step_s(
    cfg: SimConfig, chunks: list[Stage], last_backward_s: float, first_forward_s: float
) -> float:
    """Seconds the data-parallel reduction adds to an iteration on its busiest rank: the
    gradients' reduce-scatter and the weights' all-gather, once each per iteration
    (the distributed optimizer's; FSDP's too, its weights gathered once and kept across
    micro-batches, as pipelined FSDP runs with reshard_after_forward off); nothing when
    ``dp_comm`` is "hidden", what the last backward and first forward's compute cannot
    cover when "overlapped"."""
    mode = cfg.recipe.dp_comm
    if mode == "hidden" or cfg.data_parallel * cfg.expert_data_parallel == 1:
        return 0.0
    v, ranks = cfg.parallel.virtual_stages, cfg.parallel.pipeline
    per_stage = np.array([_dp_gather_bytes(cfg, st) for st in chunks])
    reduce_s = float(per_stage.reshape(v, ranks).sum(axis=0).max()) / _dp_bytes_per_s(cfg)
    gather_s = reduce_s
    if mode == "exposed":
        return reduce_s + gather_s
    return max(reduce_s - last_backward_s, 0.0) + max(gather_s - first_forward_s, 0.0)
