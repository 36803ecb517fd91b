"""Routed token-slots per expert-parallel rank, drawn for many micro-batches at once.

The same profiles as the reference trainer (targets.training.skew), vectorized with numpy
for cluster scale: per micro-batch and layer one hot expert at max/mean ``r``; calm draws
``r = 1 + 0.10 exp(0.5 z)``; spiky adds, in 2.9% of micro-batches, ``r = 2.6`` on every
layer; none is balanced routing. A rank holding ``g = E / ep`` experts receives, of the
``ep x N x k`` slots its expert-parallel group dispatches, the share::

    hot rank    (r + (g - 1) q) / E        q = (E - r) / (E - 1): another expert's load / mean
    other rank  g q / E

so the slots of all ranks sum to ``ep x N x k`` exactly (tokens are conserved in dispatch).
The simulator needs the hottest rank per layer (it gates the all-to-all and fills memory
first); ``rank_slots`` returns every rank's for the invariant tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from moeperf.targets.training.skew import (
    CALM_MEDIAN_EXCESS,
    CALM_SIGMA,
    SPIKE_PROBABILITY,
    SPIKE_RATIO,
)

SkewName = Literal["none", "calm", "spiky", "replay"]
SKEW_NAMES: tuple[SkewName, ...] = ("none", "calm", "spiky", "replay")


@dataclass(frozen=True)
class Loads:
    """Hot-expert draws for ``[..., layers]``: the max/mean ratio and the hot expert."""

    ratio: np.ndarray  # float64, >= 1
    hot_expert: np.ndarray  # int64
    spike: np.ndarray  # bool, [...] (per micro-batch)


def draw(
    rng: np.random.Generator, shape: tuple[int, ...], layers: int, experts: int, top_k: int,
    skew: SkewName,
) -> Loads:  # fmt: skip
    """Draws for micro-batches of ``shape`` (e.g. [iterations, groups, micro-batches])."""
    if skew not in SKEW_NAMES:
        raise ValueError(f"unknown skew {skew!r}; valid: {', '.join(SKEW_NAMES)}")
    full = (*shape, layers)
    if skew == "replay":  # the loads come from a file (replay_share); no draw
        return Loads(np.ones(full), np.zeros(full, dtype=np.int64), np.zeros(shape, bool))
    hot = rng.integers(0, experts, size=full)
    spike = np.zeros(shape, dtype=bool)
    if skew == "none":
        return Loads(np.ones(full), hot, spike)
    ratio = 1.0 + CALM_MEDIAN_EXCESS * np.exp(CALM_SIGMA * rng.standard_normal(full))
    if skew == "spiky":
        spike = rng.random(shape) < SPIKE_PROBABILITY
        ratio = np.where(spike[..., None], SPIKE_RATIO, ratio)
    return Loads(np.minimum(ratio, experts / top_k), hot, spike)


def hottest_share(ratio: np.ndarray, experts: int, ep: int) -> np.ndarray:
    """The hot rank's share of its group's slots, ``(r + (g - 1) q) / E``."""
    g = experts // ep
    q = (experts - ratio) / max(experts - 1, 1)
    return (ratio + (g - 1) * q) / experts


def rank_slots(
    ratio: np.ndarray, hot_expert: np.ndarray, experts: int, ep: int, group_slots: float
) -> np.ndarray:
    """Slots every rank receives, ``[..., ep]``: the hot expert's rank its share, the others
    theirs; ``group_slots`` = ep x N x k."""
    g = experts // ep
    other = g * (experts - ratio) / max(experts - 1, 1) / experts
    hot = hottest_share(ratio, experts, ep)
    shares = np.repeat(other[..., None], ep, axis=-1)
    hot_rank = hot_expert // g
    np.put_along_axis(shares, hot_rank[..., None], hot[..., None], axis=-1)
    return shares * group_slots


def replay_share(counts: np.ndarray, ep: int, shape: tuple[int, ...], layers: int) -> np.ndarray:
    """The hottest rank's share ``[*shape, layers]`` from recorded tokens per expert
    ``counts [lines, file layers, E]`` (the reference trainer's replay files): micro-batch
    k replays line k mod lines (looped, in order, as the trainer does), layer l the file's
    layer l mod its layers; each rank holds E / ep consecutive experts."""
    lines, file_layers, experts = counts.shape
    per_rank = counts.reshape(lines, file_layers, ep, experts // ep).sum(-1)
    total = np.maximum(counts.sum(-1), 1)
    share = per_rank.max(-1) / total  # [lines, file layers]
    k = np.arange(int(np.prod(shape))) % lines
    layer = np.arange(layers) % file_layers
    return share[k][:, layer].reshape(*shape, layers)
