"""Activation memory of the largest step: an estimate, documented (README, "Memory planning").

Inference keeps one layer's intermediates at a time. With N = max(chunked_prefill_tokens,
running per replica * (1 + mtp_drafts)) tokens in a step and a = activation bytes:
  residual + normed input          2 N h
  attention (the larger of)         N (q + k + v + out widths per device); MLA counts the
                                    decompressed per-head q, k (d_nope + d_rope) and v
  feed-forward                      dense: 2 N I / tp; MoE: token-slots S = dp N k / ep
                                    per device (uniform routing), S h (permuted copy) +
                                    2 S I_e / moe_tp (gate and up); shared experts 2 N I_s/tp
  logits                            R * V / tp * 4 (fp32), R = running per replica * (1 + drafts)
bytes = a * (2 N h + max(attention, feed-forward)) + logits. Routing skew can double the
MoE term on the hottest device; the allocator headroom (buffers.py) is meant to absorb it.
"""

from __future__ import annotations

from dataclasses import dataclass

from suites.plan.deploy import DeployConfig
from suites.plan.dtypes import PLAIN_BYTES
from suites.plan.model_config import ModelShape


@dataclass(frozen=True)
class ActivationPlan:
    step_tokens: int
    bytes: int


def plan_activations(m: ModelShape, d: DeployConfig) -> ActivationPlan:
    a = PLAIN_BYTES[d.activation_dtype]
    n = max(d.chunked_prefill_tokens, d.decode_tokens)
    heads = m.num_heads // d.tp
    if m.attention == "mla":
        attn = n * heads * (2 * m.head_dim + 2 * m.v_head_dim)
    else:
        kv = max(m.num_kv_heads // d.tp, 1)
        gate = 2 if m.attn_output_gate else 1
        attn = n * (heads * m.head_dim * (gate + 1) + 2 * kv * m.head_dim)
    if m.linear is not None:
        lin = m.linear
        widths = 2 * lin.num_k_heads * lin.k_head_dim + 3 * lin.num_v_heads * lin.v_head_dim
        attn = max(attn, n * widths // d.tp)
    ffn = 2 * n * m.dense_intermediate // d.tp
    if m.num_experts:
        slots = d.dp * n * m.experts_per_token // d.ep
        moe = slots * m.hidden + 2 * slots * m.expert_intermediate // d.moe_tp
        moe += 2 * n * m.shared_intermediate // d.tp
        ffn = max(ffn, moe)
    logits = d.decode_tokens * m.vocab // d.tp * 4
    return ActivationPlan(n, a * (2 * n * m.hidden + max(attn, ffn)) + logits)
