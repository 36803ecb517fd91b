"""A Hugging Face ``config.json`` read into the shape the planner needs (``ModelShape``).

Known architectures (``model_type``): mixtral (and our reference model: Mixtral plus
``moeperf_mtp_depth``), qwen3_moe, deepseek_v3 (MLA, MTP layers), qwen3_next (Gated
DeltaNet linear attention, gated full attention), kimi_linear (Kimi Delta Attention plus
MLA). Field names are transformers' (``configuration_*.py``) and vLLM's for kimi_linear.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from moeperf.suites.plan.errors import PlanError

AttentionKind = Literal["gqa", "mla"]
LinearKind = Literal["none", "gated_deltanet", "kda"]


@dataclass(frozen=True)
class LinearAttention:
    """A linear-attention layer's shape (Gated DeltaNet or Kimi Delta Attention)."""

    kind: LinearKind
    num_k_heads: int
    num_v_heads: int
    k_head_dim: int
    v_head_dim: int
    conv_kernel: int


@dataclass(frozen=True)
class ModelShape:
    model_type: str
    num_layers: int
    hidden: int
    vocab: int
    tie_word_embeddings: bool
    # attention (full-attention layers)
    attention: AttentionKind
    num_heads: int
    num_kv_heads: int  # GQA; MLA: = num_heads (no K/V heads are stored)
    head_dim: int  # GQA head dim; MLA: qk_nope + qk_rope
    qk_norm: bool  # per-head RMSNorm on q and k (Qwen3)
    attn_output_gate: bool  # Qwen3-Next: q_proj also emits a sigmoid gate per head dim
    q_lora_rank: int  # MLA; 0: q projected directly
    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    # feed-forward
    dense_intermediate: int  # SwiGLU width of a dense layer's MLP
    num_experts: int
    experts_per_token: int
    expert_intermediate: int
    num_shared_experts: int
    shared_intermediate: int  # SwiGLU width of all shared experts together
    shared_expert_gate: bool  # Qwen3-Next: sigmoid gate [hidden -> 1] on the shared expert
    router_bias: bool  # DeepSeek-V3: e_score_correction_bias [E]
    moe_layers: tuple[bool, ...]  # per main layer: MoE (True) or dense MLP
    linear_layers: tuple[bool, ...]  # per main layer: linear attention (True) or full
    linear: LinearAttention | None
    # multi-token prediction
    mtp_depth: int
    mtp_own_embeddings: bool  # DeepSeek's checkpoint stores embed and head per MTP layer

    @property
    def num_full_attention_layers(self) -> int:
        return self.linear_layers.count(False)

    @property
    def num_linear_layers(self) -> int:
        return self.linear_layers.count(True)


def load_model_config(path: Path) -> ModelShape:
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise PlanError(f"cannot read model config {path}: {exc}") from exc
    if not isinstance(raw, dict):
        raise PlanError(f"model config {path} is not a JSON object")
    return parse_model_config(raw)


class _Fields:
    """Reads fields, collecting every missing one so the error names them all."""

    def __init__(self, raw: dict[str, Any], model_type: str):
        self.raw, self.model_type = raw, model_type
        self.missing: list[str] = []

    def int(self, name: str, default: int | None = None) -> int:
        value = self.raw.get(name, default)
        if value is None:
            self.missing.append(name)
            return 0
        if not isinstance(value, int) or isinstance(value, bool):
            raise PlanError(
                f"{self.model_type} config field {name} must be an integer, not {value!r}"
            )
        return value

    def check(self) -> None:
        if self.missing:
            raise PlanError(f"{self.model_type} config.json is missing {', '.join(self.missing)}")


def _gqa(f: _Fields, shape: dict[str, Any]) -> None:
    heads = f.int("num_attention_heads")
    hidden = f.int("hidden_size")
    shape.update(
        attention="gqa",
        num_heads=heads,
        num_kv_heads=f.int("num_key_value_heads"),
        head_dim=f.int("head_dim", hidden // heads if heads else None),
        q_lora_rank=0,
        kv_lora_rank=0,
        qk_rope_head_dim=0,
        qk_nope_head_dim=0,
        v_head_dim=0,
    )


def _mla(f: _Fields, shape: dict[str, Any]) -> None:
    heads = f.int("num_attention_heads")
    nope, rope = f.int("qk_nope_head_dim"), f.int("qk_rope_head_dim")
    shape.update(
        attention="mla",
        num_heads=heads,
        num_kv_heads=heads,
        head_dim=nope + rope,
        q_lora_rank=f.raw.get("q_lora_rank") or 0,
        kv_lora_rank=f.int("kv_lora_rank"),
        qk_rope_head_dim=rope,
        qk_nope_head_dim=nope,
        v_head_dim=f.int("v_head_dim"),
    )


def _common(f: _Fields) -> dict[str, Any]:
    return dict(
        model_type=f.model_type,
        num_layers=f.int("num_hidden_layers"),
        hidden=f.int("hidden_size"),
        vocab=f.int("vocab_size"),
        tie_word_embeddings=bool(f.raw.get("tie_word_embeddings", False)),
        qk_norm=False,
        attn_output_gate=False,
        num_shared_experts=0,
        shared_intermediate=0,
        shared_expert_gate=False,
        router_bias=False,
        linear=None,
        mtp_depth=f.int("moeperf_mtp_depth", 0),
        mtp_own_embeddings=False,
    )


def _mixtral(f: _Fields) -> dict[str, Any]:
    s = _common(f)
    _gqa(f, s)
    layers = s["num_layers"]
    s.update(
        dense_intermediate=0,
        num_experts=f.int("num_local_experts"),
        experts_per_token=f.int("num_experts_per_tok"),
        expert_intermediate=f.int("intermediate_size"),
        moe_layers=(True,) * layers,
        linear_layers=(False,) * layers,
    )
    return s


def _qwen_moe_layers(f: _Fields, layers: int, experts: int) -> tuple[bool, ...]:
    # transformers' Qwen3MoeDecoderLayer: MoE unless in mlp_only_layers, every
    # decoder_sparse_step-th layer ((i + 1) % step == 0).
    step = f.int("decoder_sparse_step", 1)
    only = set(f.raw.get("mlp_only_layers") or [])
    return tuple(
        i not in only and experts > 0 and step > 0 and (i + 1) % step == 0 for i in range(layers)
    )


def _qwen3_moe(f: _Fields) -> dict[str, Any]:
    s = _common(f)
    _gqa(f, s)
    layers, experts = s["num_layers"], f.int("num_experts")
    s.update(
        qk_norm=True,
        dense_intermediate=f.int("intermediate_size"),
        num_experts=experts,
        experts_per_token=f.int("num_experts_per_tok"),
        expert_intermediate=f.int("moe_intermediate_size"),
        moe_layers=_qwen_moe_layers(f, layers, experts),
        linear_layers=(False,) * layers,
    )
    return s


def _deepseek_v3(f: _Fields) -> dict[str, Any]:
    s = _common(f)
    _mla(f, s)
    layers = s["num_layers"]
    first_dense, freq = f.int("first_k_dense_replace", 0), f.int("moe_layer_freq", 1)
    shared = f.int("n_shared_experts", 0)
    expert_inter = f.int("moe_intermediate_size")
    s.update(
        dense_intermediate=f.int("intermediate_size"),
        num_experts=f.int("n_routed_experts"),
        experts_per_token=f.int("num_experts_per_tok"),
        expert_intermediate=expert_inter,
        num_shared_experts=shared,
        shared_intermediate=shared * expert_inter,
        router_bias=f.raw.get("topk_method", "noaux_tc") == "noaux_tc",
        moe_layers=tuple(i >= first_dense and i % max(freq, 1) == 0 for i in range(layers)),
        linear_layers=(False,) * layers,
        mtp_depth=f.int("num_nextn_predict_layers", 0),
        mtp_own_embeddings=True,
    )
    return s


def _qwen3_next(f: _Fields) -> dict[str, Any]:
    s = _common(f)
    _gqa(f, s)
    layers, experts = s["num_layers"], f.int("num_experts")
    types = f.raw.get("layer_types")
    if types is None:  # transformers' default: every full_attention_interval-th layer is full
        interval = f.int("full_attention_interval", 4)
        linear = tuple((i + 1) % interval != 0 for i in range(layers))
    else:
        linear = tuple(t == "linear_attention" for t in types)
    s.update(
        qk_norm=True,
        attn_output_gate=True,
        dense_intermediate=f.int("intermediate_size"),
        num_experts=experts,
        experts_per_token=f.int("num_experts_per_tok"),
        expert_intermediate=f.int("moe_intermediate_size"),
        num_shared_experts=1,
        shared_intermediate=f.int("shared_expert_intermediate_size"),
        shared_expert_gate=True,
        moe_layers=_qwen_moe_layers(f, layers, experts),
        linear_layers=linear,
        linear=LinearAttention(
            "gated_deltanet",
            f.int("linear_num_key_heads"),
            f.int("linear_num_value_heads"),
            f.int("linear_key_head_dim"),
            f.int("linear_value_head_dim"),
            f.int("linear_conv_kernel_dim", 4),
        ),
        # Qwen's config.json names its MTP layers mtp_num_hidden_layers (ours too); a
        # config without it plans none.
        mtp_depth=f.int("mtp_num_hidden_layers", f.raw.get("num_nextn_predict_layers", 0)),
    )
    return s


def _kimi_linear(f: _Fields) -> dict[str, Any]:
    s = _common(f)
    _mla(f, s)
    layers = s["num_layers"]
    first_dense, freq = f.int("first_k_dense_replace", 0), f.int("moe_layer_freq", 1)
    shared, expert_inter = f.int("num_shared_experts", 0), f.int("moe_intermediate_size")
    lin = f.raw.get("linear_attn_config")
    if not isinstance(lin, dict):
        f.missing.append("linear_attn_config")
        lin = {}
    sub = _Fields(lin, f"{f.model_type} linear_attn_config")
    kda = set(lin.get("kda_layers") or [])  # 1-based layer numbers, as vLLM reads them
    heads, dim = sub.int("num_heads"), sub.int("head_dim")
    kernel = sub.int("short_conv_kernel_size", 4)
    if "kda_layers" not in lin:
        sub.missing.append("kda_layers")
    f.missing += [f"linear_attn_config.{m}" for m in sub.missing]
    s.update(
        dense_intermediate=f.int("intermediate_size"),
        num_experts=f.int("num_experts"),
        experts_per_token=f.int("num_experts_per_token"),
        expert_intermediate=expert_inter,
        num_shared_experts=shared,
        shared_intermediate=shared * expert_inter,
        router_bias=True,
        moe_layers=tuple(i >= first_dense and i % max(freq, 1) == 0 for i in range(layers)),
        linear_layers=tuple(i + 1 in kda for i in range(layers)),
        linear=LinearAttention("kda", heads, heads, dim, dim, kernel),
    )
    return s


PARSERS: dict[str, Callable[[_Fields], dict[str, Any]]] = {
    "mixtral": _mixtral,
    "qwen3_moe": _qwen3_moe,
    "deepseek_v3": _deepseek_v3,
    "qwen3_next": _qwen3_next,
    "kimi_linear": _kimi_linear,
}


def parse_model_config(raw: dict[str, Any]) -> ModelShape:
    model_type = raw.get("model_type")
    if model_type not in PARSERS:
        raise PlanError(
            f"unknown model_type {model_type!r} (architectures {raw.get('architectures')}); "
            f"the planner knows {', '.join(sorted(PARSERS))}"
        )
    f = _Fields(raw, str(model_type))
    shape = PARSERS[str(model_type)](f)
    f.check()
    for name in ("num_layers", "hidden", "vocab", "num_heads"):
        if shape[name] < 1:
            raise PlanError(f"{model_type} config.json: {name} must be >= 1")
    return ModelShape(**shape)
