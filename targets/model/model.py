"""A tiny Mixture-of-Experts decoder, written to be read top to bottom.

Mixtral's architecture (Jiang et al. 2024, arXiv:2401.04088; transformers'
``modeling_mixtral.py``): RMSNorm, rotary position embeddings, grouped-query attention, and
in every layer a softmax router choosing top-k of N SwiGLU experts, the k weights
renormalized to sum to one. Parameter names follow Mixtral's so a directory we write loads
with ``AutoModelForCausalLM``.

Beside it, DeepSeek-V3's multi-token prediction (arXiv:2412.19437, section 2.2): module d
combines the previous depth's hidden state at position i with the embedding of token i+1
and predicts token i+2, sharing the embedding and the output head with the main model.

Tokens travel flat, as ``[N, C]`` (N tokens of any number of sequences): a training batch
``[B, T]`` is flattened, and the serving engine packs many requests into one N. Attention is
the only place where sequences matter, so it is passed in as a function (``AttentionFn``):
dense causal attention for training (``causal_attention``), the paged KV cache in the
serving engine.

Its parts are modules of their own, shared with the hybrid model and the trainer: attention
and ``AttentionFn`` (``attention``), the router and experts (``moe``), and the operators a
training policy runs (``op_runner``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from moeperf.targets.model.attention import Attention, AttentionFn, causal_attention, rotary_cos_sin
from moeperf.targets.model.config import MoEConfig
from moeperf.targets.model.moe import MoE, Routing
from moeperf.targets.model.op_runner import DIRECT, OpRunner


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        # In float32 whatever the weights' dtype, as Mixtral does.
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


class Block(nn.Module):
    """Pre-norm transformer layer: attention, then the mixture of experts."""

    def __init__(self, cfg: MoEConfig, slot: int):
        super().__init__()
        self.slot = slot
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg, slot)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.block_sparse_moe = MoE(cfg, slot)
        self.runner: OpRunner = DIRECT

    def forward(
        self, x: Tensor, cos: Tensor, sin: Tensor, attend: AttentionFn
    ) -> tuple[Tensor, Routing]:
        return self.runner.run(("layer", self.slot, -1), self._layer, x, cos, sin, attend)

    def _layer(
        self, x: Tensor, cos: Tensor, sin: Tensor, attend: AttentionFn
    ) -> tuple[Tensor, Routing]:
        x = x + self.runner.run(("attention", self.slot, -1), self._attention, x, cos, sin, attend)
        moe_out, routing = self.block_sparse_moe(self.post_attention_layernorm(x))
        return x + moe_out, routing

    def _attention(self, x: Tensor, cos: Tensor, sin: Tensor, attend: AttentionFn) -> Tensor:
        return self.self_attn(self.input_layernorm(x), cos, sin, attend)


class MTPModule(nn.Module):
    """DeepSeek-V3 MTP: h' = W [norm(h_prev); norm(emb(token))], then one transformer block."""

    def __init__(self, cfg: MoEConfig, slot: int):
        super().__init__()
        self.hnorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.enorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.eh_proj = nn.Linear(2 * cfg.hidden_size, cfg.hidden_size, bias=False)
        self.block = Block(cfg, slot)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)  # before the shared head


@dataclass
class ModelOutput:
    logits: Tensor  # [B, T, V]
    hidden: Tensor  # [B, T, C] last layer's output, before the final norm
    tokens_per_expert: Tensor  # [L, E] int64, main layers
    aux_loss: Tensor  # mean load-balancing loss over the main layers
    loss: Tensor | None = None  # next-token cross-entropy when targets are given
    mtp_loss: Tensor | None = None  # MTP module 0's cross-entropy (predicting t+2 from h_t)


class Decoder(nn.Module):
    """The main stack, under the names of Hugging Face's Mixtral (``model.embed_tokens``,
    ``model.layers.N``, ``model.norm``), so that checkpoints load by name."""

    def __init__(self, cfg: MoEConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(Block(cfg, slot) for slot in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class MoETransformer(nn.Module):
    def __init__(self, cfg: MoEConfig):
        super().__init__()
        self.config = cfg
        self.model = Decoder(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.mtp = nn.ModuleList(MTPModule(cfg, cfg.num_layers + d) for d in range(cfg.mtp_depth))
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def set_runner(self, runner: OpRunner) -> None:
        """Route every operator (main layers and MTP modules) through ``runner``."""
        for module in self.modules():
            if isinstance(module, (Block, MoE)):
                module.runner = runner

    @property
    def blocks(self) -> list[Block]:
        """The main layers in order (an nn.ModuleList yields them as plain Modules)."""
        return [cast(Block, block) for block in self.model.layers]

    def mtp_module(self, depth: int) -> MTPModule:
        return cast(MTPModule, self.mtp[depth])

    @property
    def num_slots(self) -> int:
        """Attention slots a KV cache needs: main layers, then MTP modules."""
        return self.config.num_layers + self.config.mtp_depth

    def mtp_slot(self, depth: int) -> int:
        """MTP module ``depth``'s attention slot."""
        return self.config.num_layers + depth

    # -- the flat interface the serving engine drives --------------------------------------

    def forward_flat(
        self, tokens: Tensor, positions: Tensor, attend: AttentionFn
    ) -> tuple[Tensor, list[Routing]]:
        """Main layers over ``tokens [N]`` at ``positions [N]``: hidden ``[N, C]`` (pre-norm)."""
        cos, sin = rotary_cos_sin(positions, self.config.head_dim, self.config.rope_theta)
        x = self.model.embed_tokens(tokens)
        routings = []
        for block in self.blocks:
            x, routing = block(x, cos, sin, attend)
            routings.append(routing)
        return x, routings

    def logits(self, hidden: Tensor) -> Tensor:
        return self.lm_head(self.model.norm(hidden))

    def mtp_forward(
        self,
        depth: int,
        hidden_prev: Tensor,
        tokens: Tensor,
        positions: Tensor,
        attend: AttentionFn,
    ) -> Tensor:
        """MTP module ``depth`` at the positions of ``tokens``: from the hidden state one
        position earlier and this token's embedding, a state that predicts the next token.
        Returns ``[N, C]`` before the module's norm; chain it as the next ``hidden_prev``."""
        module = self.mtp_module(depth)
        cos, sin = rotary_cos_sin(positions, self.config.head_dim, self.config.rope_theta)
        combined = torch.cat(
            [module.hnorm(hidden_prev), module.enorm(self.model.embed_tokens(tokens))], dim=-1
        )
        x, _ = module.block(module.eh_proj(combined), cos, sin, attend)
        return x

    def mtp_logits(self, depth: int, mtp_hidden: Tensor) -> Tensor:
        return self.lm_head(self.mtp_module(depth).norm(mtp_hidden))

    # -- the batch interface training and tests use ----------------------------------------

    def forward(self, idx: Tensor, targets: Tensor | None = None) -> ModelOutput:
        """``idx [B, T]`` token ids; ``targets [B, T]`` the next tokens (-100 ignored)."""
        batch, seq_len = idx.shape
        attend = causal_attention(batch, seq_len)
        positions = torch.arange(seq_len, device=idx.device).repeat(batch)
        hidden, routings = self.forward_flat(idx.flatten(), positions, attend)
        return batch_output(self, idx, targets, hidden, routings, attend)


class _BatchModel(Protocol):
    config: Any

    def logits(self, hidden: Tensor) -> Tensor: ...

    def mtp_forward(
        self,
        depth: int,
        hidden_prev: Tensor,
        tokens: Tensor,
        positions: Tensor,
        attend: AttentionFn,
    ) -> Tensor: ...

    def mtp_logits(self, depth: int, mtp_hidden: Tensor) -> Tensor: ...


def batch_output(
    model: _BatchModel,
    idx: Tensor,
    targets: Tensor | None,
    hidden: Tensor,
    routings: list[Routing],
    attend: AttentionFn,
) -> ModelOutput:
    """A ``[B, T]`` batch's outputs from its main layers' flat ``hidden`` (either
    reference model): logits, routing, and with ``targets`` the losses."""
    batch, seq_len = idx.shape
    logits = model.logits(hidden)
    out = ModelOutput(
        logits=logits.view(batch, seq_len, -1),
        hidden=hidden.view(batch, seq_len, -1),
        tokens_per_expert=torch.stack([r.tokens_per_expert for r in routings]),
        aux_loss=torch.stack([r.aux_loss for r in routings]).mean(),
    )
    if targets is None:
        return out
    out.loss = F.cross_entropy(logits.float(), targets.flatten(), ignore_index=-100)
    if model.config.mtp_depth:
        # Entry t sees h_{t-1} (zeros at t = 0) and token t, and predicts token t+1:
        # the main model's target at t, without the main model's h_t.
        positions = torch.arange(seq_len, device=idx.device).repeat(batch)
        h = hidden.view(batch, seq_len, -1)
        h_prev = torch.cat([torch.zeros_like(h[:, :1]), h[:, :-1]], dim=1).flatten(0, 1)
        mtp_hidden = model.mtp_forward(0, h_prev, idx.flatten(), positions, attend)
        out.mtp_loss = F.cross_entropy(
            model.mtp_logits(0, mtp_hidden).float(), targets.flatten(), ignore_index=-100
        )
    return out
