"""The adaptive policy's plan: per micro-batch, after its router, how many expert slots a
stage drops (recomputed or offloaded, whichever is cheaper) so its memory fits.

Apart from simulate.py because the reference trainer's emulation (reference.py) plans with
it too, and it needs nothing of the iteration model around it.
"""

from __future__ import annotations

import numpy as np

from moeperf.targets.cluster_sim.activations import ActivationLayout

ADAPTIVE_MARGIN = 0.03  # the reference trainer's AdaptivePolicy.margin


def adaptive_plan(
    kept: np.ndarray,
    slots: np.ndarray,
    limit: np.ndarray,
    orders: list[list[tuple[bool, int]]],
    layout: ActivationLayout,
    recompute_s_per_slot: float,
    host_bytes_per_s: float,
    full_bytes: np.ndarray,
    full_s: np.ndarray,
    reserve: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Per micro-batch, after its router: keep all if the stage's alive bytes plus this
    micro-batch's fit under ``limit``; else drop the fewest expert slots that make it fit,
    each by the cheaper of recompute (its forward again) or offload (out and back over the
    host link); if dropping every slot is not enough, recompute its whole layers
    (``full_bytes`` kept per stage, ``full_s`` more forward). Vectorized over iterations and
    groups; sequential in each stage's order.

    ``reserve``: the limit a forward plans against is lowered by what the stage's forwards
    still to come before its next backward need at least (each ``full_bytes``), so a
    warm-up's early micro-batches cannot take the room of its last ones (without it a
    greedy plan can OOM where full recompute fits). The reference trainer decides without
    it, so its emulation (reference.py) leaves it off."""
    saved = kept.copy()
    extra = np.zeros_like(kept)
    # Per stage, or per stage and micro-batch (a rank's chunks side by side).
    full_bytes = np.broadcast_to(np.reshape(full_bytes, (len(orders), -1)), kept.shape[2:])
    full_s = np.broadcast_to(np.reshape(full_s, (len(orders), -1)), kept.shape[2:])
    per_slot = layout.expert_per_slot - layout.expert_kept_per_slot
    offload_s = 2 * layout.expert_per_slot / host_bytes_per_s
    cost_per_slot = min(recompute_s_per_slot, offload_s)
    for s, order in enumerate(orders):
        alive = np.zeros(kept.shape[:2])
        for k, (is_forward, j) in enumerate(order):
            if not is_forward:
                alive -= saved[:, :, s, j]
                continue
            ahead = _forwards_before_next_backward(order, k) if reserve else []
            room = limit[:, :, s] - full_bytes[s, ahead].sum()
            excess = np.maximum(alive + kept[:, :, s, j] - room, 0.0)
            dropped = np.minimum(np.ceil(excess / per_slot), slots[:, :, s, j])
            saved[:, :, s, j] = kept[:, :, s, j] - dropped * per_slot
            extra[:, :, s, j] = dropped * cost_per_slot
            whole = alive + saved[:, :, s, j] > room
            saved[:, :, s, j] = np.where(whole, np.minimum(full_bytes[s, j], saved[:, :, s, j]),
                                         saved[:, :, s, j])  # fmt: skip
            whole_s = full_s[s, j] + slots[:, :, s, j] * recompute_s_per_slot
            extra[:, :, s, j] = np.where(whole, whole_s, extra[:, :, s, j])
            alive += saved[:, :, s, j]
    return saved, extra


def _forwards_before_next_backward(order: list[tuple[bool, int]], k: int) -> list[int]:
    """Micro-batches forwarded after position ``k`` of a stage's order, before its next
    backward."""
    ahead = []
    for is_forward, j in order[k + 1 :]:
        if not is_forward:
            break
        ahead.append(j)
    return ahead
