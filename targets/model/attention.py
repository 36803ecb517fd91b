"""The default model's attention: rotary position embeddings, grouped-query attention, and
``AttentionFn``, the function through which the caller says how tokens attend.

Apart from the experts and the model stack because the hybrid model, the distributed
trainer and the serving engine reuse ``AttentionFn``, the rotary embedding and
``causal_attention`` without Mixtral's layers.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from moeperf.targets.model.config import MoEConfig

# (layer slot, q [N, H, D], k [N, Hkv, D], v [N, Hkv, D]) -> [N, H, D]. Slots 0..L-1 are
# the main layers, L + d the MTP module d: a KV cache keeps one entry per slot.
AttentionFn = Callable[[int, Tensor, Tensor, Tensor], Tensor]


def rotary_cos_sin(positions: Tensor, head_dim: int, theta: float) -> tuple[Tensor, Tensor]:
    """cos and sin ``[N, D]`` for each token's position (the "rotate half" layout)."""
    inv_freq = 1.0 / theta ** (
        torch.arange(0, head_dim, 2, device=positions.device).float() / head_dim
    )
    angles = positions.float()[:, None] * inv_freq[None, :]  # [N, D/2]
    angles = torch.cat([angles, angles], dim=-1)  # [N, D]
    return angles.cos(), angles.sin()


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate ``x [N, heads, D]``: pairs (i, i + D/2) turn by their position's angle."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return (x * cos[:, None, :] + rotated * sin[:, None, :]).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg: MoEConfig, slot: int):
        super().__init__()
        self.slot = slot
        self.num_heads, self.num_kv_heads, self.head_dim = (
            cfg.num_heads,
            cfg.num_kv_heads,
            cfg.head_dim,
        )
        self.q_proj = nn.Linear(cfg.hidden_size, cfg.num_heads * cfg.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, cfg.num_kv_heads * cfg.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, cfg.num_kv_heads * cfg.head_dim, bias=False)
        self.o_proj = nn.Linear(cfg.num_heads * cfg.head_dim, cfg.hidden_size, bias=False)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, attend: AttentionFn) -> Tensor:
        n = x.shape[0]
        q = self.q_proj(x).view(n, self.num_heads, self.head_dim)
        k = self.k_proj(x).view(n, self.num_kv_heads, self.head_dim)
        v = self.v_proj(x).view(n, self.num_kv_heads, self.head_dim)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        out = attend(self.slot, q, k, v)  # [N, H, D]
        return self.o_proj(out.reshape(n, self.num_heads * self.head_dim))


def causal_attention(batch: int, seq_len: int) -> AttentionFn:
    """Dense causal attention over a ``[batch, seq_len]`` batch laid out flat."""

    def attend(slot: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        def heads_first(t: Tensor) -> Tensor:  # [B*T, h, D] -> [B, h, T, D]
            return t.view(batch, seq_len, t.shape[1], t.shape[2]).transpose(1, 2)

        out = F.scaled_dot_product_attention(
            heads_first(q), heads_first(k), heads_first(v), is_causal=True, enable_gqa=True
        )
        return out.transpose(1, 2).reshape(batch * seq_len, q.shape[1], q.shape[2])

    return attend
