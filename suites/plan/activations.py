"""Activation memory of the largest step: an estimate, documented (docs/guides/memory-planning.md).

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

Layout "reference" (our engine, targets/serving/engine, one device) counts what that engine
holds at once instead, in the larger of its two biggest steps: the last prefill chunk of
a max-context prompt (N = chunk tokens, their context C = max_context_tokens) and a decode
step of every running request at max context (N = R (1 + drafts), R running):
  residual + normed input          2 N h
  attention (gathers the context)  N (H d rotated q + 2 Hkv d rotated k and v + 2 H d the
                                   attention output and its buffer) + 2 G Hkv d, G the
                                   context rows gathered from the paged cache (prefill: C;
                                   decode, padded into one call: R C); a boolean causal mask
                                   of N C bytes (not in activation dtype)
  MoE (S = N k slots)              the larger of 3 S h + N h (grouped input, output and
                                   weighted output, and the combined result) and 2 S h +
                                   3 N I_e (an expert's gate, up and product, at most N rows)
  rotary cos and sin               2 N d * 4 (fp32)
  MTP drafting (drafts > 0)        + 5 N h: the drafter's step after the main one keeps the
                                   main hidden state, the gathered previous states, their
                                   concatenation and the [N, 2h] input of its projection
  logits                           rows sampled (prefill: 1; decode: N) * V * 4 (fp32)
It is checked against the engine's measured peak of live tensors (docs/guides/
memory-planning.md; tests/unit/test_plan_activations.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from moeperf.suites.plan.deploy import DeployConfig
from moeperf.suites.plan.dtypes import PLAIN_BYTES
from moeperf.suites.plan.model_config import ModelShape


@dataclass(frozen=True)
class ActivationPlan:
    step_tokens: int
    bytes: int
    step: str = "largest step"  # which step it is ("prefill chunk", "decode batch")


def plan_activations(m: ModelShape, d: DeployConfig) -> ActivationPlan:
    if d.layout == "reference":
        return _reference(m, d)
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


def _reference(m: ModelShape, d: DeployConfig) -> ActivationPlan:
    context = d.max_context_tokens
    chunk = min(d.chunked_prefill_tokens, context)
    prefill = ActivationPlan(chunk, _reference_step(m, d, chunk, context, 1), "prefill chunk")
    rows = d.decode_tokens
    decode = ActivationPlan(
        rows, _reference_step(m, d, rows, d.running_per_replica * context, rows), "decode batch"
    )
    return max(prefill, decode, key=lambda p: p.bytes)


def _reference_step(
    m: ModelShape, d: DeployConfig, n: int, gathered_rows: int, logit_rows: int
) -> int:
    """One step of the reference engine over n tokens whose attention gathers
    ``gathered_rows`` context rows (module docstring)."""
    a = PLAIN_BYTES[d.activation_dtype]
    heads, kv, hd = m.num_heads, m.num_kv_heads, m.head_dim
    attn = n * (heads * hd + 2 * kv * hd + 2 * heads * hd) + 2 * gathered_rows * kv * hd
    slots = n * m.experts_per_token
    moe = max(
        3 * slots * m.hidden + n * m.hidden,
        2 * slots * m.hidden + 3 * n * m.expert_intermediate,
    )
    mask = n * d.max_context_tokens
    rope = 2 * n * hd * 4
    mtp = 5 * n * m.hidden if d.mtp_drafts else 0
    return a * (2 * n * m.hidden + max(attn, moe) + mtp) + mask + rope + logit_rows * m.vocab * 4
