"""Hiding the expert-parallel all-to-all under another micro-batch's compute.

DualPipe (DeepSeek-V3, arXiv:2412.19437 section 3.2.1) and Megatron-LM's 1F1B A2A overlap
(``--overlap-moe-expert-parallel-comm``) run a forward and a backward of two different
micro-batches as one merged op: each one's dispatch and combine proceed while the other
computes. A rank's schedule offers such a pair wherever a forward and a backward of
different micro-batches follow each other (the steady 1F1B phase); warm-up and cool-down
ops run alone and keep their transfers exposed.

The merged op takes ``max(cF + cB, aF + aB)`` (compute and transfer seconds): transfers
fit under the pair's compute until they outgrow it. What stays exposed is shared between
the two ops in proportion to their transfers, so the timeline keeps one time per op.
Without pipeline parallelism a merged pair holds two micro-batches' activations at once, so
the overlap runs F0 F1 B0 F2 B1 ... (``overlapped_single_stage_order``, Megatron's combined
1F1B order) rather than F0 B0 F1 B1 ..., whose prefix sums would see only one alive.
"""

from __future__ import annotations

import numpy as np

Order = list[tuple[bool, int]]


def overlapped_single_stage_order(microbatches: int) -> Order:
    """F0, then (F j+1, B j) pairs, then the last backward."""
    order: Order = [(True, 0)]
    for j in range(microbatches - 1):
        order += [(True, j + 1), (False, j)]
    return [*order, (False, microbatches - 1)]


def overlap_pairs(order: Order) -> list[tuple[int, int]]:
    """``(forward, backward)`` op indices of each merged pair, taken greedily along the
    order: neighbours of opposite kind on different micro-batches (a micro-batch's
    backward needs its own forward done, so those two can never merge)."""
    pairs = []
    k = 0
    while k + 1 < len(order):
        (first_fwd, first), (second_fwd, second) = order[k], order[k + 1]
        if first_fwd != second_fwd and first != second:
            pairs.append((first, second) if first_fwd else (second, first))
            k += 2
        else:
            k += 1
    return pairs


def hide_transfers(
    compute_f: np.ndarray,
    compute_b: np.ndarray,
    transfer_f: np.ndarray,
    transfer_b: np.ndarray,
    orders: list[Order],
) -> tuple[np.ndarray, np.ndarray]:
    """The exposed transfer seconds ``[..., ranks, ops]`` once each rank's pairs merge."""
    out_f, out_b = transfer_f.copy(), transfer_b.copy()
    for r, order in enumerate(orders):
        pairs = overlap_pairs(order)
        if not pairs:
            continue
        jf = np.array([f for f, _ in pairs])
        jb = np.array([b for _, b in pairs])
        a_f, a_b = transfer_f[..., r, jf], transfer_b[..., r, jb]
        total = a_f + a_b
        hidden = np.minimum(total, compute_f[..., r, jf] + compute_b[..., r, jb])
        left = np.divide(total - hidden, total, out=np.zeros_like(total), where=total > 0)
        out_f[..., r, jf] = a_f * left
        out_b[..., r, jb] = a_b * left
    return out_f, out_b
