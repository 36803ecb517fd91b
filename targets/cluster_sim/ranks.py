"""From per model chunk to per pipeline rank: each rank's schedule (1F1B, or Megatron's
interleaved 1F1B over its chunks) and one iteration's timeline from per-rank times.

Apart from simulate.py, whose iteration model only calls these: how a rank's chunks map to
its schedule (plain or interleaved, by the virtual stages) is decided here, in one place.
"""

from __future__ import annotations

import numpy as np

from moeperf.targets.cluster_sim.overlap import overlapped_single_stage_order
from moeperf.targets.cluster_sim.pipeline import (
    IterationTimeline,
    interleaved_orders,
    simulate_1f1b,
    simulate_interleaved,
    stage_orders,
)


def by_rank(a: np.ndarray, ranks: int, chunks: int) -> np.ndarray:
    """``[..., p x v, m]`` per model chunk to ``[..., p, v x m]`` per pipeline rank: chunk
    ``c p + r`` is rank r's c-th, its micro-batch j at ``c m + j`` (identity for v = 1)."""
    if chunks == 1:
        return a
    *lead, _, m = a.shape
    split = a.reshape(*lead, chunks, ranks, m)
    return np.swapaxes(split, -3, -2).reshape(*lead, ranks, chunks * m)


def rank_orders(
    ranks: int, chunks: int, microbatches: int, a2a_overlap: bool = False
) -> list[list[tuple[bool, int]]]:
    """Per pipeline rank, ``(is_forward, c m + j)`` in its schedule's order: 1F1B, or
    Megatron's interleaved 1F1B over ``chunks`` model chunks per rank. Without a pipeline,
    ``a2a_overlap`` runs one forward ahead so that forwards and backwards pair (overlap.py)."""
    if ranks == 1 and chunks == 1 and a2a_overlap:
        return [overlapped_single_stage_order(microbatches)]
    if chunks == 1:
        return stage_orders(ranks, microbatches)
    return [
        [(f, c * microbatches + j) for f, c, j in order]
        for order in interleaved_orders(ranks, chunks, microbatches)
    ]


def rank_timeline(
    forward_s: np.ndarray,
    backward_s: np.ndarray,
    hop_s: float,
    orders: list[list[tuple[bool, int]]],
    chunks: int,
    fill_s: np.ndarray | None = None,
) -> IterationTimeline:
    """One iteration from per-rank times ``[p, v m]``, its end times in the same shape."""
    if chunks == 1:
        return simulate_1f1b(forward_s, backward_s, hop_s, orders, fill_s=fill_s)
    p, q = forward_s.shape
    shape = (p, chunks, q // chunks)
    t = simulate_interleaved(forward_s.reshape(shape), backward_s.reshape(shape), hop_s,
                             fill_s=fill_s)  # fmt: skip
    return IterationTimeline(t.makespan_s, t.busy_s, t.forward_end_s.reshape(p, q),
                             t.backward_end_s.reshape(p, q))  # fmt: skip
