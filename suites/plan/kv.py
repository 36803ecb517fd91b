"""Cache bytes: per token for full-attention layers, per sequence for linear-attention ones.

Per full-attention layer and token, on one device:
- GQA: 2 (K and V) * ceil-free Hkv/tp * d * bytes; when Hkv < tp each device keeps one
  kv head (replicated, as vLLM does), so max(Hkv / tp, 1).
- MLA: (r_kv + d_rope) * bytes: the compressed latent and the shared rope key, which
  every tensor-parallel rank keeps whole (not split by tp).
Layers per device: the busiest pipeline stage's (L_full / pp rounded up). MTP modules add
one attention layer each, on the last stage: with drafts (layout "standard", vLLM and
SGLang), always (layout "reference": our engine allocates a slot per module), and the
reference engine with drafts keeps the last main layer's hidden state per token (h * bytes).
Per linear-attention layer and sequence: a recurrent state Hv * d_k * d_v (state dtype)
and a convolution state (kernel - 1) * conv channels (kv dtype, fp8 read as bf16), both
split by tp; Gated DeltaNet convolves q, k and v (2 Hk d_k + Hv d_v channels), KDA the same.
"""

from __future__ import annotations

from dataclasses import dataclass

from moeperf.suites.plan.deploy import DeployConfig
from moeperf.suites.plan.dtypes import PLAIN_BYTES
from moeperf.suites.plan.model_config import ModelShape


@dataclass(frozen=True)
class CachePlan:
    attention_layers_per_device: int  # full-attention layers whose KV this device keeps
    kv_bytes_per_token_per_layer: int
    hidden_bytes_per_token: int  # reference engine's MTP hidden-state cache
    linear_layers_per_device: int
    state_bytes_per_sequence: int  # all linear layers of this device
    kv_heads_replicated: bool

    @property
    def bytes_per_token(self) -> int:
        return (
            self.attention_layers_per_device * self.kv_bytes_per_token_per_layer
            + self.hidden_bytes_per_token
        )


def _busiest(flags: tuple[bool, ...], pp: int) -> int:
    per = len(flags) // pp
    return max(sum(flags[s * per : (s + 1) * per]) for s in range(pp))


def plan_cache(m: ModelShape, d: DeployConfig) -> CachePlan:
    kv_bytes = PLAIN_BYTES[d.kv_dtype]
    if m.attention == "mla":
        per_layer = (m.kv_lora_rank + m.qk_rope_head_dim) * kv_bytes
        replicated = False
    else:
        per_layer = 2 * max(m.num_kv_heads // d.tp, 1) * m.head_dim * kv_bytes
        replicated = m.num_kv_heads < d.tp
    full = tuple(not linear for linear in m.linear_layers)
    layers = _busiest(full, d.pp)
    mtp_kv = d.layout == "reference" or d.mtp_drafts > 0
    if m.mtp_depth and mtp_kv:  # MTP modules live on the last stage
        layers = max(layers, _last_stage(full, d.pp) + m.mtp_depth)
    hidden = m.hidden * kv_bytes if d.layout == "reference" and d.mtp_drafts > 0 else 0
    linear_layers = _busiest(m.linear_layers, d.pp)
    state = 0
    if m.linear is not None and linear_layers:
        lin = m.linear
        recurrent = (
            lin.num_v_heads * lin.k_head_dim * lin.v_head_dim * PLAIN_BYTES[d.linear_state_dtype]
        )
        channels = 2 * lin.num_k_heads * lin.k_head_dim + lin.num_v_heads * lin.v_head_dim
        conv = (lin.conv_kernel - 1) * channels * max(kv_bytes, 2)
        state = linear_layers * (recurrent + conv) // d.tp
    return CachePlan(layers, per_layer, hidden, linear_layers, state, replicated)


def _last_stage(full: tuple[bool, ...], pp: int) -> int:
    per = len(full) // pp
    return sum(full[(pp - 1) * per :])
