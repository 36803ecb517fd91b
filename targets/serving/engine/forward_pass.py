"""The main model's forward over one step's batch: every scheduled request's new tokens
packed into one flat batch, attending through the paged KV cache (and, for a hybrid
model, the linear layers' per-request state).

Apart from ``engine.py``, which decides what runs each step: this only builds the packed
inputs, runs the model once, and keeps what the step needs of its outputs (the hidden
states, the MTP module's cached inputs, the expert token counts).
"""

from __future__ import annotations

import torch
from torch import Tensor

from moeperf.targets.model.hybrid import HybridMoETransformer
from moeperf.targets.model.model import MoETransformer
from moeperf.targets.serving.engine.api import EngineCounters
from moeperf.targets.serving.engine.kv_cache import KVCache
from moeperf.targets.serving.engine.linear_state import LinearSegment, LinearStateCache, PagedLinear
from moeperf.targets.serving.engine.paged_attention import PagedAttention, Segment
from moeperf.targets.serving.engine.scheduler import ScheduledSeq


def forward_main(
    model: MoETransformer | HybridMoETransformer,
    cache: KVCache,
    linear: LinearStateCache | None,
    batch: list[ScheduledSeq],
    counters: EngineCounters,
    expert_tokens: Tensor,
) -> Tensor:
    """The batch's hidden states, one row per token fed; counts its prefill and decode
    tokens into ``counters`` and its tokens per expert into ``expert_tokens`` (in place)."""
    tokens: list[int] = []
    positions: list[int] = []
    write: list[Tensor] = []
    segments: list[Segment] = []
    row = 0
    for item in batch:
        ids = item.token_ids
        context = cache.slots(item.seq.block_ids(), 0, item.start + len(ids))
        segments.append(Segment(row, len(ids), item.start, context))
        write.append(context[item.start :])
        tokens.extend(ids)
        positions.extend(range(item.start, item.start + len(ids)))
        row += len(ids)
        if item.seq.is_decoding:
            counters.decode_tokens += len(ids)
        else:
            counters.prefill_tokens += len(ids)
    write_slots = torch.cat(write)
    attend = PagedAttention(cache, write_slots, segments)
    token_ids, token_positions = torch.tensor(tokens), torch.tensor(positions)
    if isinstance(model, HybridMoETransformer):
        assert linear is not None
        linear_segments = [
            LinearSegment(seg.token_start, seg.num_queries, item.seq, bool(item.drafts))
            for seg, item in zip(segments, batch, strict=True)
        ]
        hidden, routings = model.forward_flat(
            token_ids, token_positions, attend, PagedLinear(linear, linear_segments)
        )
    else:
        hidden, routings = model.forward_flat(token_ids, token_positions, attend)
    if cache.hidden is not None:
        cache.hidden[write_slots] = hidden
    expert_tokens += torch.stack([r.tokens_per_expert for r in routings])
    return hidden
