"""Dual-batch interleaving: the adaptive policy's extra work moved into pipeline bubbles.

Seed 000's "dual-batch interleaved scheduling": when the adaptive policy has decided to
recompute or offload part of a micro-batch, that work need not sit on the backward's
critical path. Between the micro-batch's forward and its backward its stage idles in
bubbles (waiting for a neighbour's activation or gradient, in warm-up, cool-down and around
slow micro-batches); the recompute (or the reload from host) can run there instead, and
the restored activations then live from that bubble until the backward.

The plan, per stage, walks the stage's 1F1B order on the timeline without the move and
fills each bubble, as far as it lasts, with the extra work of the pending micro-batch whose
backward comes first (earliest deadline first: for divisible work with release and
deadline times, EDF moves the most work that can be moved into given gaps, and it keeps
the restored bytes alive for the shortest time). A fill also needs memory: the bytes it
restores stay alive until that backward, so it is cut to the headroom under ``limit``
over every position in between.

Never slower, by construction: a fill is at most its bubble on the timeline without it and
every backward only loses time, so by induction over the order no operation starts later
than it did (``simulate_1f1b`` with ``fill_s`` re-times the plan; a test holds it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from moeperf.targets.cluster_sim.pipeline import IterationTimeline

# A bubble serves the pending micro-batches whose backwards come next, at most this many:
# the "dual" of dual-batch (the next backward's work, then its neighbour's).
NEIGHBOURS = 2
# Bubbles shorter than this are left alone: they are rounding, not idle hardware.
MIN_GAP_S = 1e-9


@dataclass(frozen=True)
class DualBatchPlan:
    fill_s: np.ndarray  # [p, 2m]: work done before each op of a stage's order, in its bubble
    overlap_s: np.ndarray  # [p, 2m]: work done during each op's all-to-all (compute idle)
    moved_s: np.ndarray  # [p, m]: extra seconds taken off each backward
    held_bytes: np.ndarray  # [G, p]: most activation bytes alive at once, early restores in
    decision_s: float  # wall time of planning (the seed: under 10 ms per decision)


def plan_dual_batch(
    timeline: IterationTimeline,
    forward_s: np.ndarray,
    backward_s: np.ndarray,
    orders: list[list[tuple[bool, int]]],
    comm_forward_s: np.ndarray,
    comm_backward_s: np.ndarray,
    extra_s: np.ndarray,
    restored_bytes: np.ndarray,
    saved_bytes: np.ndarray,
    limit_bytes: np.ndarray,
) -> DualBatchPlan:
    """Plan one iteration timed by ``timeline`` from ``forward_s`` and ``backward_s``
    ``[p, m]`` (the slowest expert group's, which the iteration waits for), of which
    ``comm_forward_s`` and ``comm_backward_s`` ``[p, m]`` the all-to-all and tensor-parallel
    transfers, when the stage's compute waits on the network. Per group
    ``[G, p, m]``: ``extra_s``, each backward's recompute/offload seconds (in the backward
    times); ``restored_bytes``, the bytes that work brings back; ``saved_bytes``, what each
    micro-batch keeps between its forward and backward; ``limit_bytes [G, p]``, the
    activation bytes a stage may hold. A fill of ``t`` seconds moves up to ``t`` of every
    group's extra for that micro-batch, so it must fit in every group's memory."""
    started = time.perf_counter()
    groups, p, m = extra_s.shape
    fill = np.zeros((p, 2 * m))
    overlap = np.zeros((p, 2 * m))
    moved = np.zeros((p, m))
    held = np.zeros((groups, p))
    longest_s = extra_s.max(axis=0)  # [p, m]
    with np.errstate(divide="ignore", invalid="ignore"):
        per_s = np.where(extra_s > 0, restored_bytes / extra_s, 0.0)  # bytes per moved s
    for s, order in enumerate(orders):
        # Activation bytes alive during each op (after a forward's save, before a
        # backward's release), per group: they bound what a fill may bring back early.
        signs = np.array([1.0 if f else -1.0 for f, _ in order])
        index = np.array([j for _, j in order])
        alive = np.cumsum(saved_bytes[:, s, index] * signs, axis=-1)  # [G, 2m]
        alive = np.where(signs < 0, alive + saved_bytes[:, s, index], alive)
        restored = np.zeros((groups, 2 * m))  # early-restored bytes alive during each op
        if longest_s[s].any():
            starts, ends = _op_times(timeline, forward_s, backward_s, order, s)
            gaps = starts - np.concatenate(([0.0], ends[:-1]))
            backward_at = {j: k for k, (f, j) in enumerate(order) if not f}
            pending: list[int] = []  # forwarded, backward not yet run
            for k, (is_forward, j) in enumerate(order):
                comm_s = (comm_forward_s if is_forward else comm_backward_s)[s, j]
                # First the idle gap before op k (its backward may be op k itself), then
                # op k's own transfers (for a later backward: this one is running).
                for into, free_s, after in ((fill, gaps[k], k), (overlap, comm_s, k + 1)):
                    for jj in sorted(pending, key=backward_at.__getitem__)[:NEIGHBOURS]:
                        if free_s <= MIN_GAP_S:
                            break
                        left_s = longest_s[s, jj] - moved[s, jj]
                        if left_s <= 0 or backward_at[jj] < after:
                            continue
                        span = slice(k, backward_at[jj] + 1)
                        room = np.min(
                            limit_bytes[:, s, None] - alive[:, span] - restored[:, span], axis=1
                        )
                        rate = per_s[:, s, jj]
                        take = min(free_s, left_s, _seconds_that_fit(room, rate))
                        if take <= 0:
                            continue
                        into[s, k] += take
                        moved[s, jj] += take
                        restored[:, span] += take * rate[:, None]
                        free_s -= take
                if is_forward:
                    pending.append(j)
                else:
                    pending.remove(j)
        held[:, s] = (alive + restored).max(axis=1)
    return DualBatchPlan(fill, overlap, moved, held, time.perf_counter() - started)


def _seconds_that_fit(room_bytes: np.ndarray, bytes_per_s: np.ndarray) -> float:
    """Seconds of moved work whose restored bytes fit every group's room."""
    fits = np.maximum(room_bytes, 0.0) / np.where(bytes_per_s > 0, bytes_per_s, 1.0)
    return float(np.where(bytes_per_s > 0, fits, np.inf).min())


def _op_times(
    timeline: IterationTimeline,
    forward_s: np.ndarray,
    backward_s: np.ndarray,
    order: list[tuple[bool, int]],
    s: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Start and end of each op of stage ``s`` in its order, from the timeline."""
    ends = np.array([
        (timeline.forward_end_s if f else timeline.backward_end_s)[s, j] for f, j in order
    ])  # fmt: skip
    durations = np.array([
        (forward_s if f else backward_s)[s, j] for f, j in order
    ])  # fmt: skip
    return ends - durations, ends
