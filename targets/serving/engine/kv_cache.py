"""The paged KV cache's memory: keys and values per attention slot, in fixed-size blocks.

Memory is addressed by *cache slot*: ``block_id * block_size + offset``. A sequence's
block table maps its position p to slot ``table[p // block_size] * block_size +
p % block_size``, so sequences grow without copying and share prefix blocks.

Beside keys and values, the last main layer's hidden state is kept per slot when MTP is
on: the MTP module at position p needs the main model's hidden state at p - 1, which after
a prefix-cache hit was computed by another request.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


class KVCache:
    def __init__(
        self,
        *,
        num_attention_slots: int,
        num_blocks: int,
        block_size: int,
        num_kv_heads: int,
        head_dim: int,
        hidden_size: int,
        keep_hidden: bool,
        dtype: torch.dtype,
    ):
        self.block_size = block_size
        num_cache_slots = num_blocks * block_size
        shape = (num_attention_slots, num_cache_slots, num_kv_heads, head_dim)
        self.k = torch.zeros(shape, dtype=dtype)  # [attention slot, cache slot, Hkv, D]
        self.v = torch.zeros(shape, dtype=dtype)
        self.hidden = (
            torch.zeros((num_cache_slots, hidden_size), dtype=dtype) if keep_hidden else None
        )

    @property
    def bytes_per_block(self) -> int:
        """Keys, values (and hidden states) of one block, over every attention slot."""
        per_slot = sum(t[:, 0].numel() * t.element_size() for t in (self.k, self.v))
        if self.hidden is not None:
            per_slot += self.hidden[0].numel() * self.hidden.element_size()
        return per_slot * self.block_size

    def slots(self, block_ids: Sequence[int], start: int, end: int) -> Tensor:
        """Cache slots of positions ``[start, end)`` for a sequence with these blocks."""
        positions = torch.arange(start, end)
        table = torch.tensor(block_ids, dtype=torch.long)
        return table[positions // self.block_size] * self.block_size + positions % self.block_size
