"""Bootstrap intervals of a statistic and of a ratio of two samples' statistics.

The gate (``reports.stats``, whose docstring explains the method) and the MTP A/B suite's
effect sizes (``collectors.mtp_ab_summary``) share them. A statistic is "mean", "median"
or "pNN" (a percentile, numpy's "linear" estimator as in ``collectors.quantiles``), or
"tokens/window" (``RATE_STATISTIC``): a rate of totals, reported and never resampled.

Percentiles and the median are drawn from their exact bootstrap distribution rather than
by materialising resamples: sorting a resample of ``x`` (n values, sorted) gives
``x[floor(U_(j) * n)]`` for the order statistics U_(j) of n uniforms, U_(j) ~ Beta(j,
n - j + 1), and the next one is U_(j) + (1 - U_(j)) * Beta(1, n - j). Means are
resampled (vectorized, in chunks); arrays above ``MEAN_RESAMPLE_CAP`` are first subsampled
without replacement to the cap, which widens the interval, never narrows it.
"""

from __future__ import annotations

import math

import numpy as np

MEAN_RESAMPLE_CAP = 20_000
_CHUNK_VALUES = 4_000_000  # resampled values held in memory at once
# The headline output tokens/s: ok output tokens / measured window (collectors.summary).
RATE_STATISTIC = "tokens/window"


def quantile_of(statistic: str) -> float | None:
    """The quantile a statistic names ("p99" -> 0.99, "median" -> 0.5), None for the mean
    and for "tokens/window"."""
    if statistic == "median":
        return 0.5
    if statistic in ("mean", RATE_STATISTIC):
        return None
    if statistic.startswith("p"):
        try:
            q = float(statistic[1:]) / 100
        except ValueError:
            q = -1.0
        if 0 < q < 1:
            return q
    raise ValueError(
        f"unknown statistic {statistic!r}; valid: mean, median, pNN (e.g. p99), {RATE_STATISTIC}"
    )


def _bootstrap_quantile(
    values: np.ndarray, q: float, n_boot: int, rng: np.random.Generator
) -> np.ndarray:
    """n_boot draws of the linear-estimator quantile of a bootstrap resample (exact)."""
    x = np.sort(values)
    n = len(x)
    h = (n - 1) * q
    k = math.floor(h)  # 0-based: order statistics k+1 and k+2 (1-based) are interpolated
    frac = h - k
    u1 = rng.beta(k + 1, n - k, size=n_boot)
    low = x[np.minimum((u1 * n).astype(np.int64), n - 1)]
    if frac == 0 or k + 1 >= n:
        return low
    u2 = u1 + (1 - u1) * rng.beta(1, n - k - 1, size=n_boot)
    high = x[np.minimum((u2 * n).astype(np.int64), n - 1)]
    return low + frac * (high - low)


def _bootstrap_mean(
    values: np.ndarray, n_boot: int, rng: np.random.Generator, cap: int
) -> np.ndarray:
    x = np.asarray(values, dtype=float)
    if len(x) > cap:
        x = rng.choice(x, size=cap, replace=False)
    n = len(x)
    per_chunk = max(1, _CHUNK_VALUES // n)
    means = np.empty(n_boot)
    for start in range(0, n_boot, per_chunk):
        stop = min(n_boot, start + per_chunk)
        means[start:stop] = x[rng.integers(0, n, size=(stop - start, n))].mean(axis=1)
    return means


def bootstrap_statistic(
    values: np.ndarray,
    statistic: str,
    n_boot: int = 2000,
    rng: np.random.Generator | None = None,
    cap: int = MEAN_RESAMPLE_CAP,
) -> np.ndarray:
    """n_boot bootstrap replicates of ``statistic`` of ``values`` (not "tokens/window": a
    rate of totals is reported, never resampled)."""
    if statistic == RATE_STATISTIC:
        raise ValueError(f"{RATE_STATISTIC} is reported, not resampled")
    rng = rng if rng is not None else np.random.default_rng(0)
    values = np.asarray(values, dtype=float)
    q = quantile_of(statistic)
    if q is None:
        return _bootstrap_mean(values, n_boot, rng, cap)
    return _bootstrap_quantile(values, q, n_boot, rng)


def bootstrap_ratio_ci(
    a: np.ndarray,
    b: np.ndarray,
    statistic: str,
    n_boot: int = 2000,
    level: float = 0.95,
    rng: np.random.Generator | None = None,
) -> tuple[float, float] | None:
    """Percentile-bootstrap interval of statistic(b) / statistic(a); None if undefined
    (no samples, or a baseline replicate that is not positive)."""
    if not len(a) or not len(b):
        return None
    rng = rng if rng is not None else np.random.default_rng(0)
    boot_a = bootstrap_statistic(a, statistic, n_boot, rng)
    boot_b = bootstrap_statistic(b, statistic, n_boot, rng)
    if not np.all(boot_a > 0):
        return None
    ratios = boot_b / boot_a
    tail = (1 - level) / 2
    low, high = np.quantile(ratios, [tail, 1 - tail])
    return float(low), float(high)
