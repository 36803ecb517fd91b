"""A Hugging Face ``config.json`` read into a ``SimModel``, so a published MoE can be simulated.

Model types (``model_type``) and the fields read, named as in transformers' configuration
classes (checked against transformers 5.24's ``configuration_*.py``):

- ``deepseek_v3``, ``deepseek_v2``: MLA (q_lora_rank, null for no query compression;
  kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim), n_routed_experts,
  num_experts_per_tok, moe_intermediate_size, n_shared_experts, first_k_dense_replace
  (leading dense layers of intermediate_size), num_nextn_predict_layers (MTP; absent = 0),
  n_group and topk_group (group-limited routing, read unless topk_method says it is off).
- ``qwen3_moe``, ``qwen2_moe``: GQA (num_key_value_heads; head_dim, absent or null =
  hidden / heads, as the modeling code reads it), num_experts (qwen3_moe may say
  num_local_experts, the name transformers 5 stores it under), num_experts_per_tok,
  moe_intermediate_size; dense layers of intermediate_size where mlp_only_layers and
  decoder_sparse_step put them; qwen2_moe's shared expert (shared_expert_intermediate_size).
- ``mixtral``: GQA, num_local_experts, num_experts_per_tok, intermediate_size (the expert
  width), head_dim as above.

What a ``SimModel`` cannot hold is refused rather than approximated silently: tied
embeddings (it counts embedding and head apart), DeepSeek's ``moe_layer_freq`` other than 1,
and a qwen2_moe shared expert whose width is not a multiple of the routed experts' (one of
k x F counts exactly as k shared experts of F, for weights and FLOPs alike; the real
checkpoints are multiples: Qwen1.5-MoE-A2.7B 5632 = 4 x 1408, Qwen2-57B-A14B
20480 = 8 x 2560). Left out as negligible, as ``SimModel.parameters`` leaves out all norms:
qwen2_moe's shared-expert gate (C weights a layer) and q/k/v biases, Qwen3's q/k norms.
Dense layers are counted wherever they sit; ``SimModel`` places them first (that changes
only which pipeline stage holds them).

``seq_len`` is the training sequence length, not ``max_position_embeddings`` (a context
limit reached by long-context extension, not what pre-training runs at); it defaults to
``DEFAULT_SEQ_LEN``, 4096, DeepSeek-V3's pre-training length (arXiv:2412.19437, 4.2).

Shipped fixtures (``configs/``), trimmed copies of the published ``config.json`` files:
``deepseek-v3.json`` (huggingface.co/deepseek-ai/DeepSeek-V3; the same numbers are
transformers' ``DeepseekV3Config()`` defaults, which a test holds) and
``qwen3-235b-a22b.json`` (huggingface.co/Qwen/Qwen3-235B-A22B; ``Qwen3MoeConfig()``'s defaults
are a smaller model, so only the field names are checked against it).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from moeperf.targets.cluster_sim.config import ClusterSimConfigError, SimModel

DEFAULT_SEQ_LEN = 4096
CONFIGS_DIR = Path(__file__).parent / "configs"


class _Fields:
    """Reads integer fields of one config, collecting every missing one for one error."""

    def __init__(self, raw: Mapping[str, Any], model_type: str):
        self.raw, self.model_type = raw, model_type
        self.missing: list[str] = []

    def integer(self, name: str, default: int | None = None, *, nullable: bool = False) -> int:
        """``name``'s value; ``default`` when absent (or null); ``nullable``: null means 0."""
        if name not in self.raw and default is None:
            self.missing.append(name)
            return 0
        value = self.raw.get(name, default)
        if value is None:
            if nullable:
                return 0
            if default is None:
                self.missing.append(name)
                return 0
            value = default
        if not isinstance(value, int) or isinstance(value, bool):
            raise ClusterSimConfigError(
                f"{self.model_type} config field {name} must be an integer, not {value!r}"
            )
        return value

    def first(self, *names: str) -> int:
        """The first of ``names`` present (a field transformers renamed)."""
        for name in names:
            if self.raw.get(name) is not None:
                return self.integer(name)
        self.missing.append(" or ".join(names))
        return 0

    def check(self) -> None:
        if self.missing:
            raise ClusterSimConfigError(
                f"{self.model_type} config.json is missing {', '.join(self.missing)} "
                f"(supported model types: {', '.join(sorted(READERS))})"
            )


def _gqa(f: _Fields) -> dict[str, int]:
    hidden, heads = f.integer("hidden_size"), f.integer("num_attention_heads")
    return dict(
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=f.integer("num_key_value_heads"),
        head_dim=f.integer("head_dim", hidden // heads if heads else None),
    )


def _mla(f: _Fields) -> dict[str, int]:
    """MLA has no K/V heads of their own: num_kv_heads = num_heads, head_dim the query/key
    head (nope + rope), neither used by the MLA formulas."""
    heads = f.integer("num_attention_heads")
    nope, rope = f.integer("qk_nope_head_dim"), f.integer("qk_rope_head_dim")
    if "q_lora_rank" not in f.raw:  # null is meaningful (no query compression), absent is not
        f.missing.append("q_lora_rank")
    return dict(
        hidden_size=f.integer("hidden_size"),
        num_heads=heads,
        num_kv_heads=heads,
        head_dim=nope + rope,
        q_lora_rank=f.integer("q_lora_rank", 0, nullable=True),
        kv_lora_rank=f.integer("kv_lora_rank"),
        qk_nope_head_dim=nope,
        qk_rope_head_dim=rope,
        v_head_dim=f.integer("v_head_dim"),
    )


def _deepseek(f: _Fields) -> dict[str, int]:
    freq = f.integer("moe_layer_freq", 1)
    if freq != 1:
        raise ClusterSimConfigError(
            f"{f.model_type} moe_layer_freq {freq}: only 1 (every layer past "
            f"first_k_dense_replace is MoE, as transformers builds it) is simulated"
        )
    return dict(
        _mla(f),
        num_layers=f.integer("num_hidden_layers"),
        num_experts=f.integer("n_routed_experts"),
        top_k=f.integer("num_experts_per_tok"),
        expert_hidden_size=f.integer("moe_intermediate_size"),
        shared_experts=f.integer("n_shared_experts"),
        dense_layers=f.integer("first_k_dense_replace"),
        dense_hidden_size=f.integer("intermediate_size"),
        mtp_depth=f.integer("num_nextn_predict_layers", 0),
        # Group-limited (node-limited) routing; DeepSeek-V2's "greedy" topk_method keeps
        # n_group / topk_group in its config without using them.
        **_groups(f),
    )


def _groups(f: _Fields) -> dict[str, int]:
    if f.raw.get("topk_method", "group_limited_greedy") not in ("group_limited_greedy", "noaux_tc"):
        return {}
    groups = f.integer("n_group", 1, nullable=True) or 1
    per_token = f.integer("topk_group", groups, nullable=True) or groups
    return dict(expert_groups=groups, expert_groups_per_token=per_token)


def _qwen_dense_layers(f: _Fields, layers: int, experts: int) -> int:
    """transformers' Qwen2/3 MoE decoder layer: MoE unless in mlp_only_layers, on every
    decoder_sparse_step-th layer ((i + 1) % step == 0)."""
    step = f.integer("decoder_sparse_step", 1)
    only = set(f.raw.get("mlp_only_layers") or [])
    moe = sum(
        i not in only and experts > 0 and step > 0 and (i + 1) % step == 0 for i in range(layers)
    )
    return layers - moe


def _qwen_moe(f: _Fields, experts: int) -> dict[str, int]:
    layers = f.integer("num_hidden_layers")
    dense = _qwen_dense_layers(f, layers, experts)
    return dict(
        _gqa(f),
        num_layers=layers,
        num_experts=experts,
        top_k=f.integer("num_experts_per_tok"),
        expert_hidden_size=f.integer("moe_intermediate_size"),
        dense_layers=dense,
        dense_hidden_size=f.integer("intermediate_size") if dense else 0,
    )


def _qwen3_moe(f: _Fields) -> dict[str, int]:
    return _qwen_moe(f, f.first("num_experts", "num_local_experts"))


def _qwen2_moe(f: _Fields) -> dict[str, int]:
    fields = _qwen_moe(f, f.integer("num_experts"))
    shared, width = f.integer("shared_expert_intermediate_size"), fields["expert_hidden_size"]
    if shared and width and shared % width:
        raise ClusterSimConfigError(
            f"qwen2_moe shared_expert_intermediate_size {shared} is not a multiple of "
            f"moe_intermediate_size {width}: SimModel's shared experts have the routed width"
        )
    return dict(fields, shared_experts=shared // width if width else 0)


def _mixtral(f: _Fields) -> dict[str, int]:
    return dict(
        _gqa(f),
        num_layers=f.integer("num_hidden_layers"),
        num_experts=f.integer("num_local_experts"),
        top_k=f.integer("num_experts_per_tok"),
        expert_hidden_size=f.integer("intermediate_size"),
    )


READERS: dict[str, Callable[[_Fields], dict[str, int]]] = {
    "deepseek_v3": _deepseek,
    "deepseek_v2": _deepseek,
    "qwen3_moe": _qwen3_moe,
    "qwen2_moe": _qwen2_moe,
    "mixtral": _mixtral,
}


def _load(path: str | os.PathLike[str]) -> Mapping[str, Any]:
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ClusterSimConfigError(f"cannot read model config {path}: {exc}") from exc
    if not isinstance(raw, dict):
        raise ClusterSimConfigError(f"model config {path} is not a JSON object")
    return raw


def sim_model_from_hf(
    config: Mapping[str, Any] | str | os.PathLike[str],
    seq_len: int | None = None,
    bytes_per_element: int = 2,
) -> SimModel:
    """The ``SimModel`` of a Hugging Face ``config.json`` (a mapping or its path), trained at
    ``seq_len`` (default ``DEFAULT_SEQ_LEN``) in ``bytes_per_element``-byte elements."""
    raw = config if isinstance(config, Mapping) else _load(config)
    model_type = raw.get("model_type")
    if model_type not in READERS:
        raise ClusterSimConfigError(
            f"unknown model_type {model_type!r}; supported: {', '.join(sorted(READERS))}"
        )
    f = _Fields(raw, str(model_type))
    fields = READERS[str(model_type)](f)
    vocab = f.integer("vocab_size")
    f.check()
    if raw.get("tie_word_embeddings"):
        raise ClusterSimConfigError(
            f"{model_type} ties its embeddings and head; SimModel counts them apart"
        )
    return SimModel(
        **fields,
        vocab_size=vocab,
        seq_len=DEFAULT_SEQ_LEN if seq_len is None else seq_len,
        bytes_per_element=bytes_per_element,
    )
