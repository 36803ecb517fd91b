"""The order of forwards and backwards that stage ``i`` of a ``p``-stage 1F1B pipeline runs.

1F1B (PipeDream-Flush, Narayanan et al. 2021, section 2.2): stage i runs min(p - i, m)
forwards before its first backward (the warm-up; earlier stages wait for the later ones),
then alternates one backward and one forward, then drains the remaining backwards. So
stage 0 keeps the activations of up to p micro-batches alive at once and the last stage
only one's: the activation memory that stacks up in a real pipeline's warm-up. One process
emulates stage i's memory by running its micro-batches through the whole tiny model in
this order.
"""

from __future__ import annotations

from typing import Literal

Phase = Literal["forward", "backward"]


def one_f_one_b(stages: int, stage: int, microbatches: int) -> list[tuple[Phase, int]]:
    """``[(phase, microbatch), ...]`` for one step of stage ``stage`` (0-based)."""
    if not 0 <= stage < stages:
        raise ValueError(f"stage must be in [0, {stages}), got {stage}")
    if microbatches < 1:
        raise ValueError("microbatches must be >= 1")
    warmup = min(stages - stage, microbatches)
    order: list[tuple[Phase, int]] = [("forward", m) for m in range(warmup)]
    next_forward, next_backward = warmup, 0
    while next_backward < microbatches:
        order.append(("backward", next_backward))
        next_backward += 1
        if next_forward < microbatches:
            order.append(("forward", next_forward))
            next_forward += 1
    return order


def max_in_flight(order: list[tuple[Phase, int]]) -> int:
    """Most micro-batches whose activations are alive at once under ``order``."""
    alive = peak = 0
    for phase, _ in order:
        alive += 1 if phase == "forward" else -1
        peak = max(peak, alive)
    return peak
