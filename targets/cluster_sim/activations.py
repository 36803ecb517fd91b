"""Activation bytes a micro-batch saves for backward, per layer, by policy.

Two layouts, each a set of per-token and per-routed-slot terms:

- ``reference_layout``: what the reference model (targets.model.model, float32) saves, term
  by term, as the trainer's budget ledger counts storages. Derived from the code and held
  against the ledger, exactly, by tests/unit/test_cluster_sim_activations.py.
- ``megatron_layout``: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
  Transformer Models" (arXiv:2205.05198), section 4.1, adapted the way MoE pre-training runs
  now: 16-bit activations, no dropout (its dropout masks dropped), flash attention (its
  5as/h score terms are never stored), SwiGLU experts, tensor parallelism with sequence
  parallelism (attention terms / t, section 4.2.2), and the MLP's 19sbh replaced by MoE terms
  per routed token-slot on this rank: permuted input 2C, fc1 (w1|w3) output 4F, SwiGLU
  output 2F, routing weight 4 bytes. The per-slot terms are what routing skew grows.

Units: bytes. ``C`` hidden, ``F`` expert width, ``D`` head dim, ``KV`` = Hkv x D. For MLA
models ``megatron_layout`` swaps the q/k/v terms for MLA's (``_mla_attention_elements``);
``reference_layout`` is the reference model's, GQA only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from moeperf.targets.cluster_sim.config import SimModel

PolicyName = Literal["keep-all", "full-recompute", "selective"]


@dataclass(frozen=True)
class ActivationLayout:
    attention_per_token: float  # per layer: norms, q/k/v, attention output
    layer_other_per_token: float  # per layer: post-attention norm, router
    slot_other_per_slot: float  # per layer and routed slot, kept even when experts recompute
    expert_per_slot: float  # per layer and routed slot on this rank: the expert's internals
    expert_kept_per_slot: float  # ... of which a recomputed expert still keeps (its input)
    dense_per_token: float  # per dense (non-MoE) layer, MLP internals
    once_per_token: float  # outside the layers: rotary tables, final norm, logits, loss
    layer_input_per_token: float  # per layer: what full recompute keeps
    full_once_per_token: float  # outside the layers under full recompute

    def microbatch_bytes(
        self,
        policy: PolicyName,
        tokens: float,
        layers: int,
        rank_slots: float,
        all_slots: float,
        dense_layers: int = 0,
        recomputed_slots: float = 0.0,
        head: bool = True,
    ) -> float:
        """Saved bytes of one micro-batch over ``layers`` layers.

        ``rank_slots``: routed token-slots this rank's experts received, summed over the
        layers; ``all_slots``: the slots whose permutation buffers this rank holds (its own
        tokens x top_k x layers on a real rank; every slot when one process emulates the
        group, as the reference trainer does). ``recomputed_slots``: of ``rank_slots``, those
        whose experts recompute (the adaptive policy's choice). ``head``: this stage holds
        the embedding-to-loss terms outside the layers (a one-stage model does).
        """
        if policy == "full-recompute":
            once = self.full_once_per_token if head else 0.0
            return tokens * (layers * self.layer_input_per_token + once)
        per_token = layers * (self.attention_per_token + self.layer_other_per_token)
        once = self.once_per_token if head else 0.0
        kept = tokens * (per_token + dense_layers * self.dense_per_token + once)
        kept += all_slots * self.slot_other_per_slot
        recomputed = rank_slots if policy == "selective" else recomputed_slots
        kept += (rank_slots - recomputed) * self.expert_per_slot
        kept += recomputed * self.expert_kept_per_slot
        return kept


def reference_layout(m: SimModel) -> ActivationLayout:
    """The reference model's saved tensors (units of its element size, e; int64 indices as
    2 units of float32). Per layer and token: input norm in/out and its rms (2C + 1), q, k
    (pre- and post-rotary), v and attention output with its log-sum-exp (3C + 2KV + H); then
    the post-attention norm (2C + 1), residual (C), router probabilities (E), top-k weights
    and indices (per slot 4), the grouped outputs (per slot 2C) and 8 units of bookkeeping.
    Per routed slot, the grouped input (C): each expert keeps its slice of it, a view, and
    the ledger counts a storage whole, so every slot's C counts as soon as one expert of
    this rank keeps its input (when one process emulates the group, the other ranks' slots
    too). Per routed slot on this rank, each expert keeps w1, SiLU, w3 and product outputs
    (4F). Once per token: rotary cos/sin (2D), the last residual, final norm output and
    head input (3C), the loss's log-probabilities (V) and targets with bookkeeping (5)."""
    e = m.bytes_per_element
    c, kv, h, d = m.hidden_size, m.num_kv_heads * m.head_dim, m.num_heads, m.head_dim
    return ActivationLayout(
        attention_per_token=e * (5 * c + 2 * kv + h + 1),
        layer_other_per_token=e * (3 * c + m.num_experts + 10),
        slot_other_per_slot=e * (3 * c + 4),
        expert_per_slot=e * 4 * m.expert_hidden_size,
        expert_kept_per_slot=0.0,  # its input, a slice of the grouped input: counted above
        dense_per_token=e * (4 * m.dense_hidden_size + c),
        once_per_token=e * (2 * d + 3 * c + m.vocab_size + 5),
        layer_input_per_token=e * c,
        full_once_per_token=e * (2 * d + 3 * c + m.vocab_size + 5),
    )


def _gqa_attention_elements(m: SimModel) -> float:
    """GQA, per token: LN input, QKV input, Q, K, V, flash output (out-proj input)."""
    q, kv = m.num_heads * m.head_dim, m.num_kv_heads * m.head_dim
    return 2 * m.hidden_size + q + 2 * kv + q


def _mla_attention_elements(m: SimModel) -> float:
    """MLA, per token, Korthikanti's q/k/v terms replaced by what MLA's backward needs: LN
    input and the down projections' input (2C); the compressed query, kept as its RMSNorm's
    input and as the up projection's input (2 q_lora; none without query compression); the
    joint KV down projection's output, kept as the latent norm's input plus the RoPE key
    (kv_lora + rope), and the normed latent, the KV up projection's input (kv_lora); then
    the per-head Q and K (H x (nope + rope)), V and the flash output (H x v each). The RoPE
    inputs are taken to be recomputed from Q and K (as the GQA terms assume)."""
    h, rope = m.num_heads, m.qk_rope_head_dim
    qk, v = h * (m.qk_nope_head_dim + rope), h * m.v_head_dim
    latents = 2 * m.q_lora_rank + 2 * m.kv_lora_rank + rope
    return 2 * m.hidden_size + latents + 2 * qk + 2 * v


def megatron_layout(m: SimModel, tensor: int = 1) -> ActivationLayout:
    """Korthikanti et al.'s terms, adapted as the module says, per rank of ``tensor``-way
    tensor + sequence parallelism (experts not tensor-split: expert_tensor_parallel 1).

    MLA's attention terms are ``_mla_attention_elements``'s. All attention terms are divided
    by ``tensor``, MLA's compressed latents too: an assumption (a layout whose down
    projections are replicated across the tensor group keeps them whole on every rank; they
    are 8.3 KB a token in bf16 for DeepSeek-V3, 4% of its attention terms)."""
    e = m.bytes_per_element
    c, h = m.hidden_size, m.num_heads
    f = m.expert_hidden_size
    elements = _mla_attention_elements(m) if m.is_mla else _gqa_attention_elements(m)
    attention = (e * elements + 4 * h) / tensor  # + the flash kernel's fp32 log-sum-exp
    # post-attention LN input, router input, fp32 router logits and probabilities
    layer_other = (e * 2 * c + 8 * m.num_experts) / tensor
    shared = m.shared_experts * e * (c + 3 * f)
    return ActivationLayout(
        attention_per_token=attention + shared / tensor,
        layer_other_per_token=layer_other,
        slot_other_per_slot=4.0,  # the slot's routing weight (fp32), for unpermute
        expert_per_slot=e * (c + 3 * f),  # permuted input, fc1 (w1|w3) output, SwiGLU output
        expert_kept_per_slot=e * c,
        dense_per_token=e * (2 * c + 3 * m.dense_hidden_size) / tensor,
        once_per_token=(e * c + 4 * m.vocab_size) / tensor,  # final LN input, fp32 logits
        layer_input_per_token=e * c / tensor,
        full_once_per_token=(e * c + 4 * m.vocab_size) / tensor,
    )
