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
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from targets.training.pipeline import one_f_one_b


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
    makespan_s: float  # first forward start -> last backward end
    busy_s: np.ndarray  # [p] seconds each stage computed
    forward_end_s: np.ndarray  # [p, m]
    backward_end_s: np.ndarray  # [p, m]

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
