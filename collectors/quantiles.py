"""Percentiles from raw samples, with the estimator named and a confidence interval.

The estimator is numpy's "linear" method (Hyndman & Fan type 7, the default of numpy and
pandas). The 95% interval is distribution-free: the order statistics whose ranks bound
the quantile under the binomial distribution of ranks, so it holds for any latency
distribution. Too few samples for the interval gives None, never a made-up bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

ESTIMATOR = "numpy linear (Hyndman-Fan type 7)"
CI_METHOD = "distribution-free order-statistic interval (binomial ranks), 95%"
DEFAULT_QUANTILES = (0.5, 0.9, 0.99)
# Quantile levels are compared with this tolerance (here only): 0.99 read back from JSON,
# or computed as 99 / 100, is the same level.
_Q_TOLERANCE = 1e-9


@dataclass(frozen=True, slots=True)
class QuantileEstimate:
    """Quantile ``q`` of a sample, with its 95% interval (None: too few samples)."""

    q: float
    value: float
    ci_low: float | None
    ci_high: float | None

    @property
    def label(self) -> str:
        """The level as a percentile name: "p50", "p99", "p99.9"."""
        return f"p{round(self.q * 100, 6):g}"


@dataclass(frozen=True, slots=True)
class Described:
    """Count, mean and quantiles (with their intervals) of the finite values of a sample.

    An empty sample has count 0, mean None and no quantiles.
    """

    count: int
    mean: float | None
    quantiles: tuple[QuantileEstimate, ...]

    def at(self, q: float) -> QuantileEstimate | None:
        """The estimate of quantile ``q``, None if it was not computed (or no samples)."""
        for estimate in self.quantiles:
            if math.isclose(estimate.q, q, rel_tol=0.0, abs_tol=_Q_TOLERANCE):
                return estimate
        return None

    def value_at(self, q: float) -> float | None:
        """The value of quantile ``q``, None if it was not computed (or no samples)."""
        estimate = self.at(q)
        return None if estimate is None else estimate.value


EMPTY = Described(count=0, mean=None, quantiles=())


def binomial_ppf(p: float, n: int, q: float) -> int:
    """The smallest k with P(X <= k) >= p for X ~ Binomial(n, q): ``scipy.stats.binom.ppf``.

    Computed with scipy.special's binomial CDF (bdtr) and its continuous inverse (bdtrik)
    rather than scipy.stats, which takes a second or more to import: every run's summary
    computes intervals, and a one-level run spent a fifth of its CPU importing it. The
    same values as scipy.stats (tests/unit/test_quantiles.py compares them), except where
    P(X <= k) equals p exactly (q = 0.5, p a multiple of 1 / 2**n), where the two libraries'
    roundings disagree with each other and with themselves; an interval's p, 0.025 or
    0.975, is never such a value.
    """
    from scipy import special  # a third of a second to import: only when one is computed

    guess = float(special.bdtrik(p, n, q))  # where the CDF crosses p, between integers
    k = min(max(math.ceil(guess), 0), n) if math.isfinite(guess) else 0
    while k > 0 and special.bdtr(k - 1, n, q) >= p:
        k -= 1
    while k < n and special.bdtr(k, n, q) < p:
        k += 1
    return k


def quantile_ci(
    sorted_values: np.ndarray, q: float, level: float = 0.95
) -> tuple[float | None, float | None]:
    """The order-statistic confidence interval of quantile q, or (None, None)."""
    n = len(sorted_values)
    alpha = 1 - level
    low_rank = binomial_ppf(alpha / 2, n, q)  # 0-based index of the lower bound
    high_rank = binomial_ppf(1 - alpha / 2, n, q)
    if low_rank < 1 or high_rank >= n:
        return None, None
    return float(sorted_values[low_rank - 1]), float(sorted_values[high_rank])


def describe(values: npt.ArrayLike, quantiles: tuple[float, ...] = DEFAULT_QUANTILES) -> Described:
    """Count, mean and quantiles (with 95% CIs) of the finite values given."""
    array = np.asarray(values, dtype=float)
    array = np.sort(array[np.isfinite(array)])
    if len(array) == 0:
        return EMPTY
    estimates = []
    for q in quantiles:
        low, high = quantile_ci(array, q)
        value = float(np.quantile(array, q, method="linear"))
        estimates.append(QuantileEstimate(q, value, low, high))
    return Described(count=len(array), mean=float(array.mean()), quantiles=tuple(estimates))
