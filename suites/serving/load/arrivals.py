"""Open-loop arrival schedules: when each request is meant to be sent.

Gaps are gamma-distributed with shape = burstiness and mean = 1 / rate (vLLM's
``--burstiness``): burstiness 1 is a Poisson process, below 1 burstier, above 1 more
regular. The schedule is fixed before the level starts, so a slow client shows up as
queueing delay (actual send - intended send) instead of silently lowering the load.
"""

from __future__ import annotations

import numpy as np


def arrival_offsets_s(
    rate_rps: float,
    duration_s: float,
    *,
    burstiness: float = 1.0,
    max_requests: int | None = None,
    seed: int = 0,
) -> np.ndarray:
    """Send offsets in seconds from the level start, within ``duration_s``."""
    if rate_rps <= 0:
        raise ValueError(f"rate_rps must be > 0, got {rate_rps}")
    if burstiness <= 0:
        raise ValueError(f"burstiness must be > 0, got {burstiness}")
    rng = np.random.default_rng(seed)
    # Draw in batches until past the window; 4 sigma beyond the mean rarely needs a second.
    batch = arrivals_bound(rate_rps, duration_s, burstiness, max_requests)
    offsets = np.empty(0)
    start = 0.0
    while True:
        gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate_rps * burstiness), size=batch)
        more = start + np.cumsum(gaps)
        offsets = np.concatenate([offsets, more])
        start = offsets[-1]
        if start >= duration_s or (max_requests is not None and len(offsets) >= max_requests):
            break
    offsets = offsets[offsets < duration_s]
    if max_requests is not None:
        offsets = offsets[:max_requests]
    return offsets


def arrivals_bound(
    rate_rps: float, duration_s: float, burstiness: float = 1.0, max_requests: int | None = None
) -> int:
    """How many arrivals a schedule of ``duration_s`` rarely exceeds: the mean count, 4
    standard deviations and 16 more (with gamma gaps of shape k, the count's variance
    is about the mean / k); ``max_requests`` bounds it where given."""
    expected = rate_rps * duration_s
    if max_requests is not None:  # a count-bound level's window is only a safety limit
        expected = min(expected, max_requests)
    return int(expected + 4 * np.sqrt(expected / burstiness) + 16)


def split_round_robin(offsets: np.ndarray, workers: int) -> list[tuple[float, ...]]:
    """Deal one schedule to several workers so together they keep its exact times."""
    return [tuple(float(x) for x in offsets[i::workers]) for i in range(workers)]


def split_evenly(total: int, workers: int) -> list[int]:
    """Shares of ``total`` (streams or requests) per worker, differing by at most one."""
    return [total // workers + (1 if i < total % workers else 0) for i in range(workers)]
