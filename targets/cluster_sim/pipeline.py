"""One iteration of a 1F1B pipeline as a discrete-event simulation, and its bubble.

Stage ``s`` runs its forwards and backwards in the order ``one_f_one_b`` gives (the reference
trainer's own, targets.training.pipeline). An operation starts when its stage is free and its
input has arrived: forward ``(s, j)`` after forward ``(s - 1, j)`` plus the hop, backward
``(s, j)`` after backward ``(s + 1, j)`` plus the hop (the last stage's after its own
forward). With equal times the idle share of every stage is the 1F1B bubble
``(p - 1) / (m + p - 1)`` (Narayanan et al. 2021, section 2.2; seed 003's formula, which
exceeds 100%, is not this one); with skewed times the waits grow where a slow micro-batch
holds its neighbours.

Activation memory needs no clock: a stage's saved bytes rise at each forward and fall at
each backward in its own order, so its peak is the largest prefix sum of that order.

Interleaved 1F1B (Megatron's virtual pipeline stages, Narayanan et al. 2021, section 2.2.2):
rank ``r`` of ``p`` holds ``v`` model chunks, chunk ``c`` being global stage ``c * p + r``, and
runs them in the order of Megatron-LM's ``forward_backward_pipelining_with_interleaving``.
Each op is ``1 / v`` of a stage's work, so the fill and drain shrink ``v``-fold and the bubble
becomes ``(p - 1) / (v m + p - 1)``; the price is more chunk activations alive in warm-up.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moeperf.targets.training.pipeline import one_f_one_b


def bubble_fraction(stages: int, microbatches: int) -> float:
    """Idle share of a 1F1B step with equal stage times: (p - 1) / (m + p - 1)."""
    if stages < 1 or microbatches < 1:
        raise ValueError("stages and microbatches must be >= 1")
    return (stages - 1) / (microbatches + stages - 1)


def stage_orders(stages: int, microbatches: int) -> list[list[tuple[bool, int]]]:
    """Per stage, ``(is_forward, micro-batch)`` in 1F1B order."""
    return [
        [(phase == "forward", j) for phase, j in one_f_one_b(stages, s, microbatches)]
        for s in range(stages)
    ]


@dataclass(frozen=True)
class IterationTimeline:
    """When each op ended; 1F1B's end arrays are ``[p, m]``, interleaved 1F1B's ``[p, v, m]``."""

    makespan_s: float  # first forward start -> last backward end
    busy_s: np.ndarray  # [p] seconds each stage (rank) computed
    forward_end_s: np.ndarray  # [p, m] or [p, v, m]
    backward_end_s: np.ndarray  # [p, m] or [p, v, m]

    @property
    def idle_fraction(self) -> float:
        """Idle share of all stages' time over the makespan (the measured bubble)."""
        return float(1.0 - self.busy_s.sum() / (len(self.busy_s) * self.makespan_s))


def simulate_1f1b(
    forward_s: np.ndarray,
    backward_s: np.ndarray,
    hop_s: float = 0.0,
    orders: list[list[tuple[bool, int]]] | None = None,
    fill_s: np.ndarray | None = None,
) -> IterationTimeline:
    """Times ``[p, m]`` of each stage's forward and backward of each micro-batch.
    ``fill_s [p, 2m]``: work a stage does before the op at that position of its order,
    once the op before it is done (dual-batch interleaving's moved recompute)."""
    p, m = forward_s.shape
    orders = orders or stage_orders(p, m)
    f_end = np.full((p, m), np.nan)
    b_end = np.full((p, m), np.nan)
    free = [0.0] * p
    nxt = [0] * p
    fwd, bwd = forward_s.tolist(), backward_s.tolist()
    fill = np.zeros((p, 2 * m)) if fill_s is None else fill_s
    fills = fill.tolist()
    remaining = 2 * p * m
    while remaining:
        progressed = False
        for s in range(p):
            order = orders[s]
            while nxt[s] < len(order):
                is_forward, j = order[nxt[s]]
                if is_forward:
                    ready = 0.0 if s == 0 else f_end[s - 1, j] + hop_s
                else:
                    ready = f_end[s, j] if s == p - 1 else b_end[s + 1, j] + hop_s
                if ready != ready:  # NaN: its input has not been computed yet
                    break
                start = max(free[s] + fills[s][nxt[s]], ready)
                end = start + (fwd[s][j] if is_forward else bwd[s][j])
                (f_end if is_forward else b_end)[s, j] = end
                free[s] = end
                nxt[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise RuntimeError("1F1B orders deadlocked (a bug: they never should)")
    busy = forward_s.sum(axis=1) + backward_s.sum(axis=1) + fill.sum(axis=1)
    return IterationTimeline(float(np.nanmax(b_end)), busy, f_end, b_end)


def peak_saved_bytes(saved: np.ndarray, orders: list[list[tuple[bool, int]]]) -> np.ndarray:
    """Per stage, the most activation bytes alive at once: ``saved [..., p, m]`` per micro-
    batch, added at its forward and given back at its backward."""
    p = saved.shape[-2]
    peaks = []
    for s in range(p):
        signs = np.array([1.0 if f else -1.0 for f, _ in orders[s]])
        index = np.array([j for _, j in orders[s]])
        steps = saved[..., s, index] * signs
        peaks.append(np.cumsum(steps, axis=-1).max(axis=-1))
    return np.stack(peaks, axis=-1)


InterleavedOp = tuple[bool, int, int]  # (is_forward, chunk, micro-batch)


def interleaved_bubble_fraction(stages: int, chunks: int, microbatches: int) -> float:
    """Idle share of an interleaved 1F1B step with equal times: (p - 1) / (v m + p - 1).

    Narayanan et al. 2021 (section 2.2.2): the bubble is (p - 1) / v forward-backward units
    against m units of work, so its share of the makespan is (p - 1) / (v m + p - 1)."""
    if stages < 1 or chunks < 1 or microbatches < 1:
        raise ValueError(
            f"stages, chunks and microbatches must be >= 1, got {stages}, {chunks}, {microbatches}"
        )
    return (stages - 1) / (chunks * microbatches + stages - 1)


def _interleaved_op(k: int, stages: int, chunks: int, forward: bool) -> tuple[int, int]:
    """``(chunk, micro-batch)`` of a rank's ``k``-th forward (or backward): groups of ``p``
    micro-batches run through one chunk before the next (Megatron's get_model_chunk_id),
    backwards taking the chunks last to first."""
    chunk = (k // stages) % chunks
    microbatch = (k // (stages * chunks)) * stages + k % stages
    return (chunk if forward else chunks - 1 - chunk), microbatch


def _interleaved_warmup(stages: int, rank: int, chunks: int, microbatches: int) -> int:
    """Forwards rank ``rank`` runs before its steady state. Megatron: all of them when m == p;
    else (v - 1) p to fill every chunk of the last rank, plus two per later rank, the round
    trip of a micro-batch's forward there and its backward back (which hides the hops)."""
    total = chunks * microbatches
    if microbatches == stages:
        return total
    return min((stages - rank - 1) * 2 + (chunks - 1) * stages, total)


def interleaved_orders(stages: int, chunks: int, microbatches: int) -> list[list[InterleavedOp]]:
    """Per rank, ``(is_forward, chunk, micro-batch)`` in Megatron's interleaved 1F1B order.

    Warm-up forwards, then one forward and one backward in turn, then the remaining
    backwards. With one chunk Megatron does not interleave (it runs its non-interleaved
    1F1B), so ``chunks == 1`` gives :func:`stage_orders` with chunk 0; the interleaved
    warm-up formula would instead start rank r with 2 (p - r - 1) + 1 forwards, not p - r."""
    if stages < 1 or chunks < 1 or microbatches < 1:
        raise ValueError(
            f"stages, chunks and microbatches must be >= 1, got {stages}, {chunks}, {microbatches}"
        )
    if chunks == 1:
        return [[(f, 0, j) for f, j in order] for order in stage_orders(stages, microbatches)]
    if microbatches % stages:
        raise ValueError(
            f"interleaving needs microbatches ({microbatches}) to be a multiple of stages "
            f"({stages}): micro-batches go through each chunk in groups of p"
        )
    total = chunks * microbatches
    orders = []
    for rank in range(stages):
        warmup = _interleaved_warmup(stages, rank, chunks, microbatches)
        order = [(True, *_interleaved_op(k, stages, chunks, True)) for k in range(warmup)]
        for k in range(total - warmup):
            order.append((True, *_interleaved_op(warmup + k, stages, chunks, True)))
            order.append((False, *_interleaved_op(k, stages, chunks, False)))
        for k in range(total - warmup, total):
            order.append((False, *_interleaved_op(k, stages, chunks, False)))
        orders.append(order)
    return orders


def _interleaved_ready_s(
    op: InterleavedOp, rank: int, f_end: np.ndarray, b_end: np.ndarray, hop_s: float
) -> float:
    """When the input of ``op`` on ``rank`` has arrived (NaN: not yet computed). Global stage
    g = c p + r takes its forward from stage g - 1 and its gradient from stage g + 1; the
    stage before rank 0's chunk c is rank p - 1's chunk c - 1, and the last stage's backward
    needs only its own forward."""
    is_forward, chunk, j = op
    p, v, _ = f_end.shape
    stage = chunk * p + rank
    if is_forward:
        if stage == 0:
            return 0.0
        before = stage - 1
        return float(f_end[before % p, before // p, j]) + hop_s
    if stage == v * p - 1:
        return float(f_end[rank, chunk, j])
    after = stage + 1
    return float(b_end[after % p, after // p, j]) + hop_s


def simulate_interleaved(
    forward_s: np.ndarray,
    backward_s: np.ndarray,
    hop_s: float = 0.0,
    orders: list[list[InterleavedOp]] | None = None,
    fill_s: np.ndarray | None = None,
) -> IterationTimeline:
    """Times ``[p, v, m]`` of chunk c of rank r's forward and backward of each micro-batch.
    Each rank runs one op at a time, in its order, each starting once the rank is free and
    the op's input has arrived (the event loop of :func:`simulate_1f1b`); ``fill_s
    [p, 2vm]`` as there: work before the op at that position of the rank's order."""
    if forward_s.ndim != 3 or forward_s.shape != backward_s.shape:
        raise ValueError(
            f"forward_s and backward_s must both be [p, v, m], got {forward_s.shape} and "
            f"{backward_s.shape}"
        )
    p, v, m = forward_s.shape
    orders = orders or interleaved_orders(p, v, m)
    f_end = np.full((p, v, m), np.nan)
    b_end = np.full((p, v, m), np.nan)
    free_s = [0.0] * p
    nxt = [0] * p
    fill = np.zeros((p, 2 * v * m)) if fill_s is None else fill_s
    fills = fill.tolist()
    remaining = 2 * p * v * m
    while remaining:
        progressed = False
        for r in range(p):
            while nxt[r] < len(orders[r]):
                op = orders[r][nxt[r]]
                ready_s = _interleaved_ready_s(op, r, f_end, b_end, hop_s)
                if ready_s != ready_s:  # NaN: its input has not been computed yet
                    break
                is_forward, c, j = op
                start_s = max(free_s[r] + fills[r][nxt[r]], ready_s)
                end_s = start_s + (forward_s if is_forward else backward_s)[r, c, j]
                (f_end if is_forward else b_end)[r, c, j] = end_s
                free_s[r] = float(end_s)
                nxt[r] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise RuntimeError("interleaved 1F1B orders deadlocked (a bug: they never should)")
    busy_s = forward_s.sum(axis=(1, 2)) + backward_s.sum(axis=(1, 2)) + fill.sum(axis=1)
    return IterationTimeline(float(np.nanmax(b_end)), busy_s, f_end, b_end)


def peak_saved_bytes_interleaved(
    saved: np.ndarray, orders: list[list[InterleavedOp]]
) -> np.ndarray:
    """Per rank, the most activation bytes alive at once: ``saved [..., p, v, m]`` per chunk
    and micro-batch, added at its forward and given back at its backward. Returns ``[..., p]``."""
    p = saved.shape[-3]
    peaks = []
    for r in range(p):
        signs = np.array([1.0 if f else -1.0 for f, _, _ in orders[r]])
        chunk = np.array([c for _, c, _ in orders[r]])
        microbatch = np.array([j for _, _, j in orders[r]])
        steps = saved[..., r, chunk, microbatch] * signs
        peaks.append(np.cumsum(steps, axis=-1).max(axis=-1))
    return np.stack(peaks, axis=-1)
