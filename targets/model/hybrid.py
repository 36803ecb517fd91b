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
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from moeperf.targets.model.hybrid_config import HybridConfig
from moeperf.targets.model.model import (
    AttentionFn,
    ModelOutput,
    MoE,
    OpRunner,
    Routing,
    batch_output,
    causal_attention,
    rotary_cos_sin,
)

_DELTA_CHUNK = 64  # tokens per chunk of the chunked gated delta rule
_L2_EPS = 1e-6


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


class GatedRMSNorm(nn.Module):
    """The linear layer's output norm: w * x / rms(x), then times silu(z) (norm before gate)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor, z: Tensor) -> Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        normed = self.weight * x32.to(x.dtype)
        return (normed * F.silu(z.float())).to(x.dtype)


def l2norm(x: Tensor) -> Tensor:
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + _L2_EPS)


@dataclass
class LinearState:
    """One linear layer's state for a batch of B sequences."""

    conv: Tensor  # [B, conv_dim, kernel - 1] the last inputs of the short convolution
    recurrent: Tensor  # [B, Hv, dk, dv] float32, the delta rule's S


# (layer, mixed q|k|v before the convolution [N, conv_dim], g [N, Hv], beta [N, Hv]) ->
# the layer's core output [N, Hv, dv]. The caller runs ``layer.core`` per sequence batch.
LinearFn = Callable[["GatedDeltaNet", Tensor, Tensor, Tensor], Tensor]


def delta_rule_recurrent(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, state: Tensor, every_step: bool
) -> tuple[Tensor, Tensor]:
    """The gated delta rule token by token. q, k ``[B, T, H, dk]`` (normalized, q scaled),
    v ``[B, T, H, dv]``, g and beta ``[B, T, H]``, state ``[B, H, dk, dv]``, all float32.
    Returns the outputs ``[B, T, H, dv]`` and the final state, or with ``every_step`` the
    state after each token ``[B, T, H, dk, dv]`` (MTP verification keeps them all)."""
    outs, states = [], []
    for t in range(q.shape[1]):
        state = state * g[:, t, :, None, None].exp()
        read = torch.einsum("bhkv,bhk->bhv", state, k[:, t])  # what S predicts for k_t
        delta = beta[:, t, :, None] * (v[:, t] - read)
        state = state + k[:, t, :, :, None] * delta[:, :, None, :]
        outs.append(torch.einsum("bhkv,bhk->bhv", state, q[:, t]))
        if every_step:
            states.append(state)
    final = torch.stack(states, dim=1) if every_step else state
    return torch.stack(outs, dim=1), final


def delta_rule_chunked(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, state: Tensor
) -> tuple[Tensor, Tensor]:
    """The same recurrence, ``_DELTA_CHUNK`` tokens at a time (the WY form of DeltaNet).

    Within a chunk entered with state S0, with gamma_i the cumulative log decay from the
    chunk's start and D_ij = exp(gamma_i - gamma_j): the corrections delta_i solve
    (I + A) delta = beta v - (beta k e^gamma) S0, A_ij = beta_i (k_i . k_j) D_ij for j < i
    (lower triangular, so one triangular solve); then o = (q e^gamma) S0 + (q K^T o D)
    delta with j <= i, and S = e^gamma_last S0 + (K e^(gamma_last - gamma))^T delta.
    Shapes as ``delta_rule_recurrent``; returns the outputs and the final state."""
    batch, length, heads = k.shape[:3]
    size = _DELTA_CHUNK
    pad = (-length) % size
    if pad:  # padded tokens: no decay (g = 0) and no update (beta = 0)
        q, k, v = (F.pad(x, (0, 0, 0, 0, 0, pad)) for x in (q, k, v))
        g, beta = (F.pad(x, (0, 0, 0, pad)) for x in (g, beta))
    chunks = (length + pad) // size

    def chunked(x: Tensor) -> Tensor:  # [B, T, H, ...] -> [B, H, chunks, size, ...]
        x = x.view(batch, chunks, size, heads, *x.shape[3:]).transpose(2, 3)
        return x.transpose(1, 2)

    q, k, v = chunked(q), chunked(k), chunked(v)
    gamma = chunked(g).cumsum(-1)  # [B, H, chunks, size]
    beta = chunked(beta)
    decay = (gamma[..., :, None] - gamma[..., None, :]).tril().exp().tril()  # D, j <= i
    strictly_lower = torch.ones(size, size, dtype=torch.bool).tril(-1)
    a = (beta[..., None] * (k @ k.transpose(-1, -2)) * decay).masked_fill(~strictly_lower, 0)
    system = a + torch.eye(size)
    u = torch.linalg.solve_triangular(system, beta[..., None] * v, upper=False)
    w = torch.linalg.solve_triangular(
        system, beta[..., None] * k * gamma[..., None].exp(), upper=False
    )
    scores = (q @ k.transpose(-1, -2)) * decay  # causal, diagonal included
    q_decayed = q * gamma[..., None].exp()
    k_to_end = k * (gamma[..., -1:] - gamma)[..., None].exp()
    outs = []
    for c in range(chunks):
        delta = u[:, :, c] - w[:, :, c] @ state
        outs.append(q_decayed[:, :, c] @ state + scores[:, :, c] @ delta)
        state = (
            gamma[:, :, c, -1, None, None].exp() * state
            + k_to_end[:, :, c].transpose(-1, -2) @ delta
        )
    out = torch.stack(outs, dim=2).flatten(2, 3)  # [B, H, T + pad, dv]
    return out.transpose(1, 2)[:, :length], state


class GatedDeltaNet(nn.Module):
    """Gated DeltaNet linear attention (Qwen3-Next's ``linear_attn``)."""

    def __init__(self, cfg: HybridConfig, layer: int, linear_slot: int):
        super().__init__()
        self.layer = layer
        self.linear_slot = linear_slot  # index among the linear layers: its state's slot
        self.num_k_heads, self.num_v_heads = cfg.linear_num_key_heads, cfg.linear_num_value_heads
        self.dk, self.dv = cfg.linear_key_head_dim, cfg.linear_value_head_dim
        self.key_dim, self.value_dim = cfg.linear_key_dim, cfg.linear_value_dim
        self.kernel = cfg.linear_conv_kernel_dim
        self.conv_dim = cfg.conv_dim
        self.in_proj_qkvz = nn.Linear(
            cfg.hidden_size, 2 * self.key_dim + 2 * self.value_dim, bias=False
        )
        self.in_proj_ba = nn.Linear(cfg.hidden_size, 2 * self.num_v_heads, bias=False)
        # Depthwise causal convolution over q|k|v (left padding is the caller's: the state).
        self.conv1d = nn.Conv1d(
            self.conv_dim, self.conv_dim, self.kernel, groups=self.conv_dim, bias=False,
            padding=self.kernel - 1,
        )  # fmt: skip
        self.dt_bias = nn.Parameter(torch.ones(self.num_v_heads))
        self.A_log = nn.Parameter(torch.empty(self.num_v_heads).uniform_(0.01, 16).log())
        self.norm = GatedRMSNorm(self.dv, cfg.rms_norm_eps)
        self.out_proj = nn.Linear(self.value_dim, cfg.hidden_size, bias=False)

    def forward(self, x: Tensor, linear: LinearFn) -> Tensor:
        n = x.shape[0]
        mixed_qkv, z, b, a = self._project(x)
        beta = b.sigmoid()
        g = -self.A_log.float().exp() * F.softplus(a.float() + self.dt_bias)  # log decay <= 0
        core = linear(self, mixed_qkv, g, beta)  # [N, Hv, dv]
        out = self.norm(core.reshape(-1, self.dv), z.reshape(-1, self.dv))
        return self.out_proj(out.view(n, self.value_dim))

    def _project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """q|k|v ``[N, conv_dim]``, z ``[N, Hv, dv]``, b and a ``[N, Hv]``. The checkpoint's
        projections are grouped by key head: [q, k, v..., z...] and [b..., a...] per head."""
        n, per = x.shape[0], self.num_v_heads // self.num_k_heads
        qkvz = self.in_proj_qkvz(x).view(n, self.num_k_heads, -1)
        q, k, v, z = qkvz.split([self.dk, self.dk, per * self.dv, per * self.dv], dim=-1)
        b, a = self.in_proj_ba(x).view(n, self.num_k_heads, 2 * per).split([per, per], dim=-1)
        mixed = torch.cat([q.reshape(n, -1), k.reshape(n, -1), v.reshape(n, -1)], dim=-1)
        return (
            mixed,
            z.reshape(n, self.num_v_heads, self.dv),
            b.reshape(n, self.num_v_heads),
            a.reshape(n, self.num_v_heads),
        )

    def zero_state(self, batch: int, dtype: torch.dtype) -> LinearState:
        return LinearState(
            torch.zeros(batch, self.conv_dim, self.kernel - 1, dtype=dtype),
            torch.zeros(batch, self.num_v_heads, self.dk, self.dv),
        )

    def core(
        self,
        mixed_qkv: Tensor,
        g: Tensor,
        beta: Tensor,
        state: LinearState,
        every_step: bool = False,
    ) -> tuple[Tensor, LinearState]:
        """B sequences of T new tokens from ``state``: mixed_qkv ``[B, T, conv_dim]``, g and
        beta ``[B, T, Hv]``. Returns the core output ``[B, T, Hv, dv]`` and the state after
        the last token; with ``every_step``, after each token (conv ``[B, T, conv_dim,
        kernel - 1]``, recurrent ``[B, T, Hv, dk, dv]``), for MTP verification to keep the
        one of the last accepted token."""
        batch, length = mixed_qkv.shape[:2]
        # The convolution sees the state's last inputs, then the new ones.
        history = torch.cat([state.conv, mixed_qkv.transpose(1, 2)], dim=-1)
        weight = self.conv1d.weight.to(history.dtype)
        mixed = F.silu(F.conv1d(history, weight, groups=self.conv_dim)).transpose(1, 2)
        q, k, v = mixed.split([self.key_dim, self.key_dim, self.value_dim], dim=-1)
        per = self.num_v_heads // self.num_k_heads  # each q/k head serves `per` value heads
        q = q.reshape(batch, length, self.num_k_heads, self.dk).repeat_interleave(per, dim=2)
        k = k.reshape(batch, length, self.num_k_heads, self.dk).repeat_interleave(per, dim=2)
        v = v.reshape(batch, length, self.num_v_heads, self.dv)
        q = l2norm(q.float()) * self.dk**-0.5
        k = l2norm(k.float())
        v, g, beta = v.float(), g.float(), beta.float()
        if every_step or length <= 8:
            out, recurrent = delta_rule_recurrent(q, k, v, g, beta, state.recurrent, every_step)
        else:
            out, recurrent = delta_rule_chunked(q, k, v, g, beta, state.recurrent)
        kept = self.kernel - 1
        if every_step:  # the last `kept` inputs after each new token
            windows = history.unfold(-1, kept, 1)[:, :, 1:]  # [B, conv_dim, T, kept]
            conv = windows.permute(0, 2, 1, 3).contiguous()
        else:
            conv = history[:, :, -kept:].contiguous()
        return out.to(mixed_qkv.dtype), LinearState(conv, recurrent)


def dense_linear(batch: int, seq_len: int) -> LinearFn:
    """Linear attention over a ``[batch, seq_len]`` batch laid out flat, from zero states."""

    def linear(layer: GatedDeltaNet, mixed_qkv: Tensor, g: Tensor, beta: Tensor) -> Tensor:
        state = layer.zero_state(batch, mixed_qkv.dtype)
        out, _ = layer.core(
            mixed_qkv.view(batch, seq_len, -1),
            g.view(batch, seq_len, -1),
            beta.view(batch, seq_len, -1),
            state,
        )
        return out.reshape(batch * seq_len, layer.num_v_heads, layer.dv)

    return linear


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
    """Top-k routed experts (``targets.model.model.MoE``, renormalized weights) plus a
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
