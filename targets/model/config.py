"""The model's shape, and its mapping to a Hugging Face Mixtral ``config.json``.

The architecture is Mixtral's (transformers' ``MixtralForCausalLM``), so a model directory
we write loads there too. The multi-token-prediction (MTP) module is ours, in the style of
DeepSeek-V3 (arXiv:2412.19437, section 2.2); it is stored under keys Mixtral ignores and
described by the ``moeperf_mtp_depth`` entry of ``config.json``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any


@dataclass(frozen=True)
class MoEConfig:
    # Tokens in the vocabulary (embedding and output-head rows).
    vocab_size: int = 4096
    # Width of the residual stream (a multiple of num_heads).
    hidden_size: int = 256
    expert_hidden_size: int = 128  # SwiGLU width of one expert (Mixtral: intermediate_size)
    # Transformer decoder layers, each attention then an MoE feed-forward.
    num_layers: int = 4
    # Attention query heads (a multiple of num_kv_heads).
    num_heads: int = 8
    num_kv_heads: int = 2  # grouped-query attention: num_heads / num_kv_heads queries share a K/V
    # Routed experts per layer.
    num_experts: int = 8
    # Experts each token is routed to (1 to num_experts).
    top_k: int = 2
    # The longest sequence the model takes, in tokens (max_position_embeddings).
    max_position: int = 2048
    # Base of the rotary position embedding's frequencies.
    rope_theta: float = 10000.0
    # Epsilon of the RMSNorm layers.
    rms_norm_eps: float = 1e-5
    mtp_depth: int = 1  # MTP modules (0: none); serving chains module 1 for k > depth drafts
    # Beginning-of-sequence token id, as written to config.json.
    bos_token_id: int = 1
    # End-of-sequence token id, as written to config.json.
    eos_token_id: int = 2

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_heads:
            raise ValueError("hidden_size must be a multiple of num_heads")
        if self.num_heads % self.num_kv_heads:
            raise ValueError("num_heads must be a multiple of num_kv_heads")
        if not 1 <= self.top_k <= self.num_experts:
            raise ValueError("top_k must be between 1 and num_experts")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    def to_hf(self) -> dict[str, Any]:
        """``config.json`` for transformers' Mixtral, plus our MTP depth."""
        return {
            "architectures": ["MixtralForCausalLM"],
            "model_type": "mixtral",
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.expert_hidden_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "num_local_experts": self.num_experts,
            "num_experts_per_tok": self.top_k,
            "max_position_embeddings": self.max_position,
            "rope_theta": self.rope_theta,
            "rope_parameters": {"rope_type": "default", "rope_theta": self.rope_theta},
            "rms_norm_eps": self.rms_norm_eps,
            "hidden_act": "silu",
            "tie_word_embeddings": False,
            "sliding_window": None,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": self.eos_token_id,
            "torch_dtype": "bfloat16",
            "moeperf_mtp_depth": self.mtp_depth,
        }

    @classmethod
    def from_hf(cls, hf: dict[str, Any]) -> MoEConfig:
        rope = hf.get("rope_parameters") or {}
        return cls(
            vocab_size=hf["vocab_size"],
            hidden_size=hf["hidden_size"],
            expert_hidden_size=hf["intermediate_size"],
            num_layers=hf["num_hidden_layers"],
            num_heads=hf["num_attention_heads"],
            num_kv_heads=hf["num_key_value_heads"],
            num_experts=hf["num_local_experts"],
            top_k=hf["num_experts_per_tok"],
            max_position=hf["max_position_embeddings"],
            rope_theta=float(rope.get("rope_theta", hf.get("rope_theta", 10000.0))),
            rms_norm_eps=hf["rms_norm_eps"],
            mtp_depth=hf.get("moeperf_mtp_depth", 0),
            bos_token_id=hf.get("bos_token_id", 1),
            eos_token_id=hf.get("eos_token_id", 2),
        )

    def replace(self, **changes: Any) -> MoEConfig:
        known = {f.name for f in fields(self)}
        unknown = set(changes) - known
        if unknown:
            raise ValueError(f"unknown MoEConfig fields {sorted(unknown)}; valid: {sorted(known)}")
        return MoEConfig(**{**asdict(self), **changes})
