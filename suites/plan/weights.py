"""Parameters per component, and their bytes per device under the parallel layout.

Per layer (h hidden, H heads, d head dim, Hkv kv heads, I widths; the table is in
docs/guides/memory-planning.md):
attention GQA: q h*H*d (x2 with Qwen3-Next's output gate), k and v h*Hkv*d each, o H*d*h,
plus 2d for q/k norms; MLA: q_a h*r_q + r_q, q_b r_q*H*(d_nope+d_rope) (or h*H*(d_nope+
d_rope) without r_q), kv_a h*(r_kv+d_rope) + r_kv, kv_b r_kv*H*(d_nope+d_v), o H*d_v*h;
SwiGLU MLP 3*h*I; routed experts E*3*h*I_e, router h*E (+E correction bias); shared
experts 3*h*I_s (+h gate); two norms 2h. Layouts: tp splits heads, MLP widths, vocab;
K/V projections are replicated when Hkv < tp (each device keeps one kv head); MLA's
down-projections (q_a, kv_a) are replicated; experts are E/ep per device, each split over
moe_tp = tp*dp/ep; routers, norms replicated; pp gives each stage L/pp layers, the first
the embedding, the last the final norm, head and MTP modules: the busiest stage is reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from moeperf.suites.plan.deploy import DeployConfig
from moeperf.suites.plan.dtypes import WEIGHT_BYTES, high_precision_bytes
from moeperf.suites.plan.model_config import ModelShape

COMPONENTS = (
    "embeddings",
    "lm_head",
    "attention",
    "linear_attention",
    "dense_mlp",
    "routed_experts",
    "shared_experts",
    "router",
    "norms",
    "mtp",
)


@dataclass
class Tally:
    """Parameter counts by component: whole model, one device, and the quantized part."""

    total: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COMPONENTS, 0))
    device_quantized: dict[str, float] = field(
        default_factory=lambda: dict.fromkeys(COMPONENTS, 0.0)
    )
    device_plain: dict[str, float] = field(default_factory=lambda: dict.fromkeys(COMPONENTS, 0.0))

    def add(self, component: str, params: int, split: float = 1, quantized: bool = True) -> None:
        self.total[component] += params
        target = self.device_quantized if quantized else self.device_plain
        target[component] += params / split


@dataclass(frozen=True)
class WeightPlan:
    params_total: dict[str, int]  # whole model, by component
    bytes_per_device: dict[str, int]  # the busiest pipeline stage's device, by component

    @property
    def total_params(self) -> int:
        return sum(self.params_total.values())

    @property
    def main_params(self) -> int:
        return self.total_params - self.params_total["mtp"]

    @property
    def device_bytes(self) -> int:
        return sum(self.bytes_per_device.values())


def _attention(t: Tally, m: ModelShape, d: DeployConfig, comp: str) -> None:
    h, tp = m.hidden, d.tp
    if m.attention == "gqa":
        q_out = m.num_heads * m.head_dim * (2 if m.attn_output_gate else 1)
        t.add(comp, h * q_out, tp)
        kv_device = max(m.num_kv_heads // tp, 1)  # replicated when Hkv < tp
        kv = h * m.num_kv_heads * m.head_dim
        t.add(comp, 2 * kv, kv / (h * kv_device * m.head_dim))
        t.add(comp, m.num_heads * m.head_dim * h, tp)
        if m.qk_norm:
            t.add("norms", 2 * m.head_dim, quantized=False)
        return
    qk = m.qk_nope_head_dim + m.qk_rope_head_dim
    if m.q_lora_rank:
        t.add(comp, h * m.q_lora_rank)  # replicated
        t.add("norms", m.q_lora_rank, quantized=False)
        t.add(comp, m.q_lora_rank * m.num_heads * qk, tp)
    else:
        t.add(comp, h * m.num_heads * qk, tp)
    t.add(comp, h * (m.kv_lora_rank + m.qk_rope_head_dim))  # replicated
    t.add("norms", m.kv_lora_rank, quantized=False)
    t.add(comp, m.kv_lora_rank * m.num_heads * (m.qk_nope_head_dim + m.v_head_dim), tp)
    t.add(comp, m.num_heads * m.v_head_dim * h, tp)


def _linear_attention(t: Tally, m: ModelShape, d: DeployConfig) -> None:
    lin, h, tp, c = m.linear, m.hidden, d.tp, "linear_attention"
    assert lin is not None
    qk, v = lin.num_k_heads * lin.k_head_dim, lin.num_v_heads * lin.v_head_dim
    if lin.kind == "gated_deltanet":  # transformers' Qwen3NextGatedDeltaNet
        t.add(c, h * (2 * qk + 2 * v), tp)  # in_proj_qkvz
        t.add(c, h * 2 * lin.num_v_heads, tp)  # in_proj_ba
        t.add(c, (2 * qk + v) * lin.conv_kernel, tp, quantized=False)  # conv1d, no bias
        t.add(c, 2 * lin.num_v_heads, tp, quantized=False)  # dt_bias, A_log
        t.add("norms", lin.v_head_dim, quantized=False)  # gated RMSNorm
        t.add(c, v * h, tp)  # out_proj
        return
    # Kimi Delta Attention (vLLM's kimi_linear.py): an estimate, not checked against a
    # published parameter count: q, k, v, low-rank forget gate f and output gate g
    # (h -> d -> H*d), beta, per-head A_log and dt_bias, q/k/v short convs, o.
    t.add(c, 3 * h * qk, tp)
    t.add(c, 2 * (h * lin.k_head_dim + lin.k_head_dim * qk), tp)
    t.add(c, h * lin.num_v_heads, tp)
    t.add(c, lin.num_k_heads + qk, tp, quantized=False)
    t.add(c, 3 * qk * lin.conv_kernel, tp, quantized=False)
    t.add("norms", lin.v_head_dim, quantized=False)
    t.add(c, v * h, tp)


def _ffn(t: Tally, m: ModelShape, d: DeployConfig, moe: bool, comp: str | None) -> None:
    h = m.hidden
    if not moe:
        t.add(comp or "dense_mlp", 3 * h * m.dense_intermediate, d.tp)
        return
    t.add(comp or "routed_experts", m.num_experts * 3 * h * m.expert_intermediate, d.ep * d.moe_tp)
    t.add(
        comp or "router",
        h * m.num_experts + (m.num_experts if m.router_bias else 0),
        quantized=False,
    )
    if m.shared_intermediate:
        t.add(comp or "shared_experts", 3 * h * m.shared_intermediate, d.tp)
    if m.shared_expert_gate:
        t.add(comp or "shared_experts", h, quantized=False)


def _layer(t: Tally, m: ModelShape, d: DeployConfig, i: int, comp: str | None = None) -> None:
    if i >= 0 and m.linear_layers[i]:
        if comp is None:
            _linear_attention(t, m, d)
        else:
            _linear_into(t, m, d, comp)
    else:
        _attention(t, m, d, comp or "attention")
    _ffn(t, m, d, m.moe_layers[i] if i >= 0 else m.num_experts > 0, comp)
    t.add(comp or "norms", 2 * m.hidden, quantized=False)


def _linear_into(t: Tally, m: ModelShape, d: DeployConfig, comp: str) -> None:
    sub = Tally()
    _linear_attention(sub, m, d)
    for name in COMPONENTS:
        t.total[comp] += sub.total[name]
        t.device_quantized[comp] += sub.device_quantized[name]
        t.device_plain[comp] += sub.device_plain[name]


def _embeddings(t: Tally, m: ModelShape, d: DeployConfig, comp: str, head: bool) -> None:
    t.add(comp, m.vocab * m.hidden, d.tp, quantized=False)
    if head:
        t.add(
            "lm_head" if comp == "embeddings" else comp, m.vocab * m.hidden, d.tp, quantized=False
        )


def _mtp(t: Tally, m: ModelShape, d: DeployConfig) -> None:
    """DeepSeek-V3's MTP module: enorm, hnorm, eh_proj [2h -> h], one layer, a norm; its
    checkpoint also stores its own embedding and head (ours share the main model's)."""
    for _ in range(m.mtp_depth):
        t.add("mtp", 3 * m.hidden, quantized=False)  # enorm, hnorm, final norm
        t.add("mtp", 2 * m.hidden * m.hidden, quantized=False)  # eh_proj (bf16 in fp8 checkpoints)
        _layer(t, m, d, -1, "mtp")
        if m.mtp_own_embeddings:
            _embeddings(t, m, d, "mtp", head=True)


def _stage(m: ModelShape, d: DeployConfig, stage: int) -> Tally:
    t = Tally()
    per = m.num_layers // d.pp
    last = stage == d.pp - 1
    if stage == 0:
        _embeddings(t, m, d, "embeddings", head=False)
    for i in range(stage * per, (stage + 1) * per):
        _layer(t, m, d, i)
    if last:
        t.add("norms", m.hidden, quantized=False)
        if not m.tie_word_embeddings or d.pp > 1:
            t.add("lm_head", m.vocab * m.hidden, d.tp, quantized=False)
        _mtp(t, m, d)
    return t


def plan_weights(m: ModelShape, d: DeployConfig) -> WeightPlan:
    q_bytes, p_bytes = WEIGHT_BYTES[d.weight_dtype], high_precision_bytes(d.weight_dtype)
    stages = [_stage(m, d, s) for s in range(d.pp)]
    totals = dict.fromkeys(COMPONENTS, 0)
    for s in stages:
        for c in COMPONENTS:
            totals[c] += s.total[c]
    if m.tie_word_embeddings and d.pp > 1:  # the last stage's copy is not a new parameter
        totals["lm_head"] = 0

    def device_bytes(s: Tally) -> dict[str, int]:
        return {
            c: round(s.device_quantized[c] * q_bytes + s.device_plain[c] * p_bytes)
            for c in COMPONENTS
        }

    per_stage = [device_bytes(s) for s in stages]
    busiest = max(per_stage, key=lambda b: sum(b.values()))
    return WeightPlan(params_total=totals, bytes_per_device=busiest)
