"""Model FLOPs per token of a simulated model: the reference trainer's formula
(targets.training.flops, Megatron's convention), extended to shared experts and dense layers.

For a ``SimModel.of(MoEConfig)`` the two agree exactly (a test holds that), so a simulated
MFU and a measured one share a numerator. Per layer and token (MACs x 6, recompute never
counted)::

    attention projections  C * D * (H + 2 Hkv) + H * D * C
    attention scores       2 * H * D * T * causal_factor
    MoE layer              C * E (router) + (k + shared) * 3 * C * F
    dense layer            3 * C * F_dense
    head                   C * V per head pass (1 + MTP modules)
    MTP eh_proj            2 * C * C per MTP module

For MLA (``SimModel.is_mla``) the projections are ``SimModel.attention_params()`` (one MAC
per weight per token) and the scores ``H * (Dnope + Drope + Dv) * T * causal_factor``:
QK^T costs H x (Dnope + Drope) MACs per key, the weighted sum of values H x Dv (GQA's
``2 * H * D`` is the same with all three dims equal to D). That is the training-time
(non-absorbed) form, in which K and V are up-projected per head, as Megatron counts MLA.
"""

from __future__ import annotations

from moeperf.targets.cluster_sim.config import SimModel
from moeperf.targets.training.flops import MEGATRON_CAUSAL_FACTOR, TRAIN_FLOPS_PER_MAC


def attention_macs_per_token(m: SimModel, causal_factor: float = MEGATRON_CAUSAL_FACTOR) -> float:
    return attention_projection_macs_per_token(m) + attention_score_macs_per_token(m, causal_factor)


def attention_projection_macs_per_token(m: SimModel) -> float:
    """The projections' GEMMs: one MAC per weight (GQA's q, k, v and o; MLA's paths)."""
    if m.is_mla:
        return m.attention_params()
    q, kv = m.num_heads * m.head_dim, m.num_kv_heads * m.head_dim
    return m.hidden_size * (q + 2 * kv) + q * m.hidden_size


def attention_score_macs_per_token(
    m: SimModel, causal_factor: float = MEGATRON_CAUSAL_FACTOR
) -> float:
    """QK^T and the weighted sum of values over the (causal share of the) sequence."""
    if m.is_mla:
        per_key = m.num_heads * (m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim)
        return per_key * m.seq_len * causal_factor
    return 2 * m.num_heads * m.head_dim * m.seq_len * causal_factor


def moe_macs_per_token(m: SimModel) -> float:
    """Router plus the top-k routed and the shared experts of one MoE layer."""
    experts = (m.top_k + m.shared_experts) * 3 * m.hidden_size * m.expert_hidden_size
    return m.hidden_size * m.num_experts + experts


def routed_expert_macs_per_slot(m: SimModel) -> float:
    """One routed token-slot through one expert's SwiGLU (what skew moves between ranks)."""
    return 3 * m.hidden_size * m.expert_hidden_size


def dense_macs_per_token(m: SimModel) -> float:
    return 3 * m.hidden_size * m.dense_hidden_size


def head_macs_per_token(m: SimModel) -> float:
    return (1 + m.mtp_depth) * m.hidden_size * m.vocab_size + m.mtp_depth * 2 * m.hidden_size**2


def training_flops_per_token(m: SimModel, causal_factor: float = MEGATRON_CAUSAL_FACTOR) -> float:
    """Model FLOPs of one trained token, forward and backward."""
    blocks = m.num_layers + m.mtp_depth
    macs = (
        blocks * attention_macs_per_token(m, causal_factor)
        + (m.moe_layers + m.mtp_depth) * moe_macs_per_token(m)
        + m.dense_layers * dense_macs_per_token(m)
        + head_macs_per_token(m)
    )
    return TRAIN_FLOPS_PER_MAC * macs
