"""Gated DeltaNet, the hybrid model's linear attention (Qwen3-Next's ``linear_attn``): its
projections, short causal convolution and output norm, the gated delta rule (token by token
and chunked), the per-sequence ``LinearState`` and ``LinearFn``, through which the caller
runs the layer's ``core`` over each sequence's state.

Apart from the hybrid model's stack (``hybrid``) because it is a mixer with its own state
and recurrence: the serving engine's state slots (targets.serving.engine.linear_state) and
the tests drive it without the rest of the model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from moeperf.targets.model.hybrid_config import HybridConfig

_DELTA_CHUNK = 64  # tokens per chunk of the chunked gated delta rule
_L2_EPS = 1e-6


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
