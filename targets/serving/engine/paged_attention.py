"""Attention for a step's packed tokens over the paged KV cache.

A step's tokens are packed flat (``[N, ...]``) from many sequences. Each sequence's run of
queries is a ``Segment``: queries at consecutive positions, attending to every position of
its sequence up to their own (causal), read from the cache through the sequence's slots.
New keys and values are written into the cache first, then read back with the rest.

Short segments (decode steps, MTP verification and drafting) are padded into one batched
call per layer; long ones (prefill chunks) run one call each.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from moeperf.targets.serving.engine.kv_cache import KVCache

_BATCHED_MAX_QUERIES = 8  # segments this short are padded together


@dataclass(frozen=True)
class Segment:
    token_start: int  # index of the first query in the step's flat tokens
    num_queries: int
    first_position: int  # position of the first query in its sequence
    context_slots: Tensor  # [first_position + num_queries] cache slot of every position


class PagedAttention:
    """An ``AttentionFn`` (see targets.model.attention) for one forward over packed tokens."""

    def __init__(self, cache: KVCache, write_slots: Tensor, segments: list[Segment]):
        self.cache = cache
        self.write_slots = write_slots  # [N] where each token's key and value go
        self.long = [s for s in segments if s.num_queries > _BATCHED_MAX_QUERIES]
        short = [s for s in segments if s.num_queries <= _BATCHED_MAX_QUERIES]
        self.batched = _pad_short_segments(short) if short else None

    def __call__(self, slot: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        k_cache, v_cache = self.cache.k[slot], self.cache.v[slot]
        k_cache[self.write_slots] = k
        v_cache[self.write_slots] = v
        out = torch.empty_like(q)
        for seg in self.long:
            rows = slice(seg.token_start, seg.token_start + seg.num_queries)
            out[rows] = _attend_one(q[rows], k_cache, v_cache, seg)
        if self.batched is not None:
            query_rows, valid, context_slots, mask = self.batched
            qb = q[query_rows].transpose(1, 2)  # [B, H, Q, D]
            kb = _gather(k_cache, context_slots).transpose(1, 2)  # [B, Hkv, K, D]
            vb = _gather(v_cache, context_slots).transpose(1, 2)
            ob = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=mask, enable_gqa=True)
            out[query_rows[valid]] = ob.transpose(1, 2)[valid]
        return out


def _attend_one(q: Tensor, k_cache: Tensor, v_cache: Tensor, seg: Segment) -> Tensor:
    k = _gather(k_cache, seg.context_slots).transpose(0, 1)[None]  # [1, Hkv, K, D]
    v = _gather(v_cache, seg.context_slots).transpose(0, 1)[None]
    qh = q.transpose(0, 1)[None]  # [1, H, Q, D]
    if seg.first_position == 0:
        out = F.scaled_dot_product_attention(qh, k, v, is_causal=True, enable_gqa=True)
    else:
        query_pos = torch.arange(seg.first_position, seg.first_position + seg.num_queries)
        mask = torch.arange(k.shape[2])[None, :] <= query_pos[:, None]
        out = F.scaled_dot_product_attention(qh, k, v, attn_mask=mask, enable_gqa=True)
    return out[0].transpose(0, 1)


def _gather(cache: Tensor, slots: Tensor) -> Tensor:
    """``cache[slots]`` for slots of any shape, by ``index_select`` on the flat slots:
    several times faster on CPU than advanced indexing (a decode step at 1,900 tokens of
    context spent most of its attention time in the gather)."""
    return cache.index_select(0, slots.reshape(-1)).view(*slots.shape, *cache.shape[1:])


def _pad_short_segments(segments: list[Segment]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Index tensors for one padded call: query rows ``[B, Q]``, which are real ``[B, Q]``,
    context slots ``[B, K]`` and the causal mask ``[B, 1, Q, K]``."""
    max_q = max(s.num_queries for s in segments)
    max_k = max(len(s.context_slots) for s in segments)
    batch = len(segments)
    query_rows = torch.zeros((batch, max_q), dtype=torch.long)
    query_pos = torch.zeros((batch, max_q), dtype=torch.long)  # padding attends to position 0
    valid = torch.zeros((batch, max_q), dtype=torch.bool)
    context_slots = torch.zeros((batch, max_k), dtype=torch.long)
    for b, s in enumerate(segments):
        n = s.num_queries
        query_rows[b, :n] = torch.arange(s.token_start, s.token_start + n)
        query_pos[b, :n] = torch.arange(s.first_position, s.first_position + n)
        valid[b, :n] = True
        context_slots[b, : len(s.context_slots)] = s.context_slots
    mask = torch.arange(max_k)[None, None, :] <= query_pos[:, :, None]  # [B, Q, K]
    return query_rows, valid, context_slots, mask[:, None]
