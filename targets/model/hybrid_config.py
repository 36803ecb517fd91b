"""The hybrid model's shape, and its mapping to a Hugging Face Qwen3-Next ``config.json``.

The architecture is Qwen3-Next's (transformers' ``Qwen3NextForCausalLM``): Gated DeltaNet
linear-attention layers with a gated full-attention layer every ``full_attention_interval``
layers, and MoE with a shared expert in every layer. The MTP module is stored under the
``mtp.`` keys the Qwen3-Next checkpoint uses (which transformers ignores on load) and
described by ``mtp_num_hidden_layers``, as Qwen's config.json does.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any


@dataclass(frozen=True)
class HybridConfig:
    vocab_size: int = 4096
    hidden_size: int = 256
    num_layers: int = 4
    full_attention_interval: int = 4  # layer i is full attention when (i + 1) % interval == 0
    # gated full attention (Qwen3-Next: q_proj also emits a sigmoid gate per head dim)
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 64
    partial_rotary_factor: float = 0.25  # RoPE on the first quarter of each head
    rope_theta: float = 10000.0
    # Gated DeltaNet
    linear_num_key_heads: int = 2
    linear_num_value_heads: int = 4
    # 128, as Qwen3-Next's: vLLM's CPU gated-delta-rule kernel serves it, and refused the
    # 32 of the first hybrid model ("Unexpected head dim size, 32").
    linear_key_head_dim: int = 128
    linear_value_head_dim: int = 128
    linear_conv_kernel_dim: int = 4
    # mixture of experts, a shared expert beside the routed ones
    num_experts: int = 8
    top_k: int = 2
    expert_hidden_size: int = 128  # moe_intermediate_size
    shared_expert_hidden_size: int = 128
    max_position: int = 2048
    rms_norm_eps: float = 1e-6
    mtp_depth: int = 1
    bos_token_id: int = 1
    eos_token_id: int = 2

    def __post_init__(self) -> None:
        problems = []
        if self.num_heads % self.num_kv_heads:
            problems.append("num_heads must be a multiple of num_kv_heads")
        if self.linear_num_value_heads % self.linear_num_key_heads:
            problems.append("linear_num_value_heads must be a multiple of linear_num_key_heads")
        if not 1 <= self.top_k <= self.num_experts:
            problems.append("top_k must be between 1 and num_experts")
        if self.rotary_dim % 2 or self.rotary_dim < 2:
            problems.append("head_dim * partial_rotary_factor must be an even number >= 2")
        if not self.layer_is_linear.count(False):
            problems.append("the model needs at least one full-attention layer")
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def layer_is_linear(self) -> tuple[bool, ...]:
        interval = self.full_attention_interval
        return tuple(bool((i + 1) % interval) for i in range(self.num_layers))

    @property
    def num_full_layers(self) -> int:
        return self.layer_is_linear.count(False)

    @property
    def num_linear_layers(self) -> int:
        return self.layer_is_linear.count(True)

    @property
    def linear_key_dim(self) -> int:
        return self.linear_num_key_heads * self.linear_key_head_dim

    @property
    def linear_value_dim(self) -> int:
        return self.linear_num_value_heads * self.linear_value_head_dim

    @property
    def conv_dim(self) -> int:
        """Channels the short convolution runs over: q, k and v together."""
        return 2 * self.linear_key_dim + self.linear_value_dim

    def to_hf(self) -> dict[str, Any]:
        """``config.json`` for transformers' Qwen3-Next."""
        rope = {
            "rope_type": "default",
            "rope_theta": self.rope_theta,
            "partial_rotary_factor": self.partial_rotary_factor,
        }
        layer_types = [
            "linear_attention" if lin else "full_attention" for lin in self.layer_is_linear
        ]
        return {
            "architectures": ["Qwen3NextForCausalLM"],
            "model_type": "qwen3_next",
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.expert_hidden_size,  # of a dense layer: there is none
            "num_hidden_layers": self.num_layers,
            "layer_types": layer_types,
            "full_attention_interval": self.full_attention_interval,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "partial_rotary_factor": self.partial_rotary_factor,
            "rope_theta": self.rope_theta,
            "rope_parameters": rope,
            "linear_num_key_heads": self.linear_num_key_heads,
            "linear_num_value_heads": self.linear_num_value_heads,
            "linear_key_head_dim": self.linear_key_head_dim,
            "linear_value_head_dim": self.linear_value_head_dim,
            "linear_conv_kernel_dim": self.linear_conv_kernel_dim,
            "num_experts": self.num_experts,
            "num_experts_per_tok": self.top_k,
            "moe_intermediate_size": self.expert_hidden_size,
            "shared_expert_intermediate_size": self.shared_expert_hidden_size,
            "norm_topk_prob": True,
            "decoder_sparse_step": 1,
            "mlp_only_layers": [],
            "max_position_embeddings": self.max_position,
            "rms_norm_eps": self.rms_norm_eps,
            "hidden_act": "silu",
            "attention_bias": False,
            "tie_word_embeddings": False,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": self.eos_token_id,
            "torch_dtype": "bfloat16",
            "mtp_num_hidden_layers": self.mtp_depth,
            "mtp_use_dedicated_embeddings": False,
        }

    @classmethod
    def from_hf(cls, hf: dict[str, Any]) -> HybridConfig:
        rope = hf.get("rope_parameters") or {}
        types = hf.get("layer_types")
        interval = hf.get("full_attention_interval", 4)
        config = cls(
            vocab_size=hf["vocab_size"],
            hidden_size=hf["hidden_size"],
            num_layers=hf["num_hidden_layers"],
            full_attention_interval=interval,
            num_heads=hf["num_attention_heads"],
            num_kv_heads=hf["num_key_value_heads"],
            head_dim=hf["head_dim"],
            partial_rotary_factor=float(
                rope.get("partial_rotary_factor", hf.get("partial_rotary_factor", 0.25))
            ),
            rope_theta=float(rope.get("rope_theta", hf.get("rope_theta", 10000.0))),
            linear_num_key_heads=hf["linear_num_key_heads"],
            linear_num_value_heads=hf["linear_num_value_heads"],
            linear_key_head_dim=hf["linear_key_head_dim"],
            linear_value_head_dim=hf["linear_value_head_dim"],
            linear_conv_kernel_dim=hf["linear_conv_kernel_dim"],
            num_experts=hf["num_experts"],
            top_k=hf["num_experts_per_tok"],
            expert_hidden_size=hf["moe_intermediate_size"],
            shared_expert_hidden_size=hf["shared_expert_intermediate_size"],
            max_position=hf["max_position_embeddings"],
            rms_norm_eps=hf["rms_norm_eps"],
            mtp_depth=hf.get("mtp_num_hidden_layers", 0),
            bos_token_id=hf.get("bos_token_id", 1),
            eos_token_id=hf.get("eos_token_id", 2),
        )
        expected = [
            "linear_attention" if lin else "full_attention" for lin in config.layer_is_linear
        ]
        if types is not None and list(types) != expected:
            raise ValueError(
                "layer_types must follow full_attention_interval "
                f"({interval}: {expected}); got {types}"
            )
        for name in ("mlp_only_layers",):
            if hf.get(name):
                raise ValueError(f"{name} must be empty: every layer of this model is MoE")
        if hf.get("decoder_sparse_step", 1) != 1 or not hf.get("norm_topk_prob", True):
            raise ValueError("decoder_sparse_step must be 1 and norm_topk_prob true")
        return config

    def replace(self, **changes: Any) -> HybridConfig:
        known = {f.name for f in fields(self)}
        unknown = set(changes) - known
        if unknown:
            raise ValueError(
                f"unknown HybridConfig fields {sorted(unknown)}; valid: {sorted(known)}"
            )
        return HybridConfig(**{**asdict(self), **changes})
