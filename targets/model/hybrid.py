"""A tiny hybrid-attention MoE decoder: Qwen3-Next's architecture, read top to bottom.

Qwen3-Next (transformers' ``modeling_qwen3_next.py``; Yang et al., "Gated Delta Networks",
arXiv:2412.06464) interleaves two token mixers. Most layers are Gated DeltaNet linear
attention: each sequence keeps a fixed-size state per head, a dk x dv matrix S that every
token decays (by exp(g)), reads (S^T k), corrects towards its value (the delta rule, with
rate beta) and writes back, plus a short causal convolution over the last few inputs. Every
``full_attention_interval``-th layer is ordinary softmax attention with a growing KV
cache, gated per head dimension by a sigmoid of a second query projection, with RMSNorm on
q and k and RoPE on the first quarter of each head. Every layer's feed-forward is a
mixture of experts beside a shared expert, the shared one gated by a sigmoid.

Norms are Qwen3-Next's: x / rms(x) * (1 + w), w starting at zero. Parameter names are the
Qwen3-Next checkpoint's, so a directory we write loads with ``AutoModelForCausalLM``.

As in ``targets.model.model``, tokens travel flat (``[N, C]``) and what depends on the
sequences is passed in: ``AttentionFn`` for the full-attention layers, and ``LinearFn``
for the linear ones (one call per layer: the caller knows which tokens belong to which
sequence and where each sequence's state lives; dense causal attention and a zero initial
state for training, the paged KV cache and the engine's state slots in serving).

The MTP module (DeepSeek-V3's idea, Qwen3-Next's layout as vLLM loads it): from the
embedding of token i+1 and the main model's hidden state at i, through ``fc`` and one
full-attention decoder layer, a state predicting token i+2 with the shared head.

Gated DeltaNet (the linear layers, their state and the delta rule) is in ``gated_deltanet``.
"""

from __future__ import annotations

from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from moeperf.targets.model.attention import AttentionFn, causal_attention, rotary_cos_sin
from moeperf.targets.model.gated_deltanet import GatedDeltaNet, LinearFn, dense_linear
from moeperf.targets.model.hybrid_config import HybridConfig
from moeperf.targets.model.model import ModelOutput, batch_output
from moeperf.targets.model.moe import MoE, Routing
from moeperf.targets.model.op_runner import OpRunner


class ZeroCenteredRMSNorm(nn.Module):
    """Qwen3-Next's RMSNorm: x / rms(x) * (1 + w), in float32, w initialized to zero."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x: Tensor) -> Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (x32 * (1.0 + self.weight.float())).to(x.dtype)


class GatedAttention(nn.Module):
    """Full attention with a sigmoid output gate, q/k RMSNorm and partial RoPE."""

    def __init__(self, cfg: HybridConfig, slot: int):
        super().__init__()
        self.slot = slot  # its KV-cache slot: full-attention layers in order, then MTP
        self.num_heads, self.num_kv_heads, self.head_dim = (
            cfg.num_heads,
            cfg.num_kv_heads,
            cfg.head_dim,
        )
        self.rotary_dim = cfg.rotary_dim
        self.q_proj = nn.Linear(cfg.hidden_size, 2 * cfg.num_heads * cfg.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, cfg.num_kv_heads * cfg.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, cfg.num_kv_heads * cfg.head_dim, bias=False)
        self.o_proj = nn.Linear(cfg.num_heads * cfg.head_dim, cfg.hidden_size, bias=False)
        self.q_norm = ZeroCenteredRMSNorm(cfg.head_dim, cfg.rms_norm_eps)
        self.k_norm = ZeroCenteredRMSNorm(cfg.head_dim, cfg.rms_norm_eps)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, attend: AttentionFn) -> Tensor:
        n = x.shape[0]
        # Per head: head_dim query values, then head_dim gate values.
        q, gate = self.q_proj(x).view(n, self.num_heads, 2 * self.head_dim).chunk(2, dim=-1)
        q = self._rotate(self.q_norm(q), cos, sin)
        k = self.k_norm(self.k_proj(x).view(n, self.num_kv_heads, self.head_dim))
        k = self._rotate(k, cos, sin)
        v = self.v_proj(x).view(n, self.num_kv_heads, self.head_dim)
        out = attend(self.slot, q, k, v) * torch.sigmoid(gate)  # [N, H, D]
        return self.o_proj(out.reshape(n, self.num_heads * self.head_dim))

    def _rotate(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        """RoPE on the first ``rotary_dim`` dims of each head; the rest pass through."""
        rot, rest = x[..., : self.rotary_dim], x[..., self.rotary_dim :]
        half = self.rotary_dim // 2
        turned = torch.cat([-rot[..., half:], rot[..., :half]], dim=-1)
        rot = (rot * cos[:, None, :] + turned * sin[:, None, :]).to(x.dtype)
        return torch.cat([rot, rest], dim=-1)


class SwiGLU(nn.Module):
    """down(silu(gate x) * up x), Qwen's names."""

    def __init__(self, hidden: int, width: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, width, bias=False)
        self.up_proj = nn.Linear(hidden, width, bias=False)
        self.down_proj = nn.Linear(width, hidden, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class SharedExpertMoE(MoE):
    """Top-k routed experts (``targets.model.moe.MoE``, renormalized weights) plus a
    shared expert every token goes through, scaled by sigmoid(shared_expert_gate x)."""

    def __init__(self, cfg: HybridConfig, layer: int):
        super().__init__(cfg, layer, lambda: SwiGLU(cfg.hidden_size, cfg.expert_hidden_size))
        self.shared_expert = SwiGLU(cfg.hidden_size, cfg.shared_expert_hidden_size)
        self.shared_expert_gate = nn.Linear(cfg.hidden_size, 1, bias=False)

    def forward(self, x: Tensor) -> tuple[Tensor, Routing]:
        routed, routing = super().forward(x)
        shared = torch.sigmoid(self.shared_expert_gate(x)) * self.shared_expert(x)
        return routed + shared, routing


class HybridBlock(nn.Module):
    """Pre-norm layer: a token mixer (linear or full attention), then the MoE."""

    def __init__(self, cfg: HybridConfig, layer: int, mixer: GatedDeltaNet | GatedAttention):
        super().__init__()
        self.input_layernorm = ZeroCenteredRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        if isinstance(mixer, GatedDeltaNet):
            self.linear_attn: GatedDeltaNet | None = mixer
            self.self_attn: GatedAttention | None = None
        else:
            self.linear_attn, self.self_attn = None, mixer
        self.post_attention_layernorm = ZeroCenteredRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = SharedExpertMoE(cfg, layer)

    def forward(
        self, x: Tensor, cos: Tensor, sin: Tensor, attend: AttentionFn, linear: LinearFn
    ) -> tuple[Tensor, Routing]:
        normed = self.input_layernorm(x)
        if self.linear_attn is not None:
            x = x + self.linear_attn(normed, linear)
        else:
            assert self.self_attn is not None
            x = x + self.self_attn(normed, cos, sin, attend)
        moe_out, routing = self.mlp(self.post_attention_layernorm(x))
        return x + moe_out, routing


class HybridMTP(nn.Module):
    """Qwen3-Next's MTP module (``mtp.*``): fc [norm(emb(token)); norm(h_prev)], one
    full-attention MoE layer, and a final norm before the shared head."""

    def __init__(self, cfg: HybridConfig):
        super().__init__()
        self.pre_fc_norm_embedding = ZeroCenteredRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.pre_fc_norm_hidden = ZeroCenteredRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.fc = nn.Linear(2 * cfg.hidden_size, cfg.hidden_size, bias=False)
        slot = cfg.num_full_layers
        self.layers = nn.ModuleList([HybridBlock(cfg, cfg.num_layers, GatedAttention(cfg, slot))])
        self.norm = ZeroCenteredRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class HybridDecoder(nn.Module):
    """The main stack under Qwen3-Next's names (``model.embed_tokens``, ``model.layers.N``,
    ``model.norm``)."""

    def __init__(self, cfg: HybridConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        layers, full, linear = [], 0, 0
        for i, is_linear in enumerate(cfg.layer_is_linear):
            if is_linear:
                layers.append(HybridBlock(cfg, i, GatedDeltaNet(cfg, i, linear)))
                linear += 1
            else:
                layers.append(HybridBlock(cfg, i, GatedAttention(cfg, full)))
                full += 1
        self.layers = nn.ModuleList(layers)
        self.norm = ZeroCenteredRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class HybridMoETransformer(nn.Module):
    """The hybrid model; the same flat interface as ``MoETransformer`` for the engine, plus
    the ``LinearFn`` its linear layers need."""

    def __init__(self, cfg: HybridConfig):
        super().__init__()
        if cfg.mtp_depth > 1:
            raise ValueError("the hybrid model has at most one MTP module (mtp_depth <= 1)")
        self.config = cfg
        self.model = HybridDecoder(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.mtp = HybridMTP(cfg) if cfg.mtp_depth else None
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def set_runner(self, runner: OpRunner) -> None:
        for module in self.modules():
            if isinstance(module, MoE):
                module.runner = runner

    @property
    def blocks(self) -> list[HybridBlock]:
        return [cast(HybridBlock, block) for block in self.model.layers]

    @property
    def linear_layers(self) -> list[GatedDeltaNet]:
        return [b.linear_attn for b in self.blocks if b.linear_attn is not None]

    @property
    def num_slots(self) -> int:
        """KV-cache slots: the full-attention layers, then the MTP module's."""
        return self.config.num_full_layers + self.config.mtp_depth

    def mtp_slot(self, depth: int) -> int:
        return self.config.num_full_layers + depth

    def _mtp(self) -> HybridMTP:
        if self.mtp is None:
            raise ValueError("the model has no MTP module")
        return self.mtp

    # -- the flat interface the serving engine drives --------------------------------------

    def forward_flat(
        self, tokens: Tensor, positions: Tensor, attend: AttentionFn, linear: LinearFn
    ) -> tuple[Tensor, list[Routing]]:
        cos, sin = rotary_cos_sin(positions, self.config.rotary_dim, self.config.rope_theta)
        x = self.model.embed_tokens(tokens)
        routings = []
        for block in self.blocks:
            x, routing = block(x, cos, sin, attend, linear)
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
        """The MTP module at the positions of ``tokens`` (``depth`` must be 0: chain it for
        more drafts); returns ``[N, C]`` before its norm."""
        if depth:
            raise ValueError("the hybrid model has one MTP module: depth 0")
        mtp = self._mtp()
        cos, sin = rotary_cos_sin(positions, self.config.rotary_dim, self.config.rope_theta)
        combined = torch.cat(
            [
                mtp.pre_fc_norm_embedding(self.model.embed_tokens(tokens)),
                mtp.pre_fc_norm_hidden(hidden_prev),
            ],
            dim=-1,
        )
        block = cast(HybridBlock, mtp.layers[0])
        x, _ = block(mtp.fc(combined), cos, sin, attend, _no_linear)
        return x

    def mtp_logits(self, depth: int, mtp_hidden: Tensor) -> Tensor:
        return self.lm_head(self._mtp().norm(mtp_hidden))

    # -- the batch interface training and tests use ----------------------------------------

    def forward(self, idx: Tensor, targets: Tensor | None = None) -> ModelOutput:
        batch, seq_len = idx.shape
        attend = causal_attention(batch, seq_len)
        positions = torch.arange(seq_len, device=idx.device).repeat(batch)
        hidden, routings = self.forward_flat(
            idx.flatten(), positions, attend, dense_linear(batch, seq_len)
        )
        return batch_output(self, idx, targets, hidden, routings, attend)


def _no_linear(layer: GatedDeltaNet, mixed_qkv: Tensor, g: Tensor, beta: Tensor) -> Tensor:
    raise AssertionError("the MTP module has no linear-attention layer")
