"""Percentiles from raw samples, with the estimator named and a confidence interval.

The estimator is numpy's "linear" method (Hyndman & Fan type 7, the default of numpy and
pandas). The 95% interval is distribution-free: the order statistics whose ranks bound
the quantile under the binomial distribution of ranks, so it holds for any latency
distribution. Too few samples for the interval gives None, never a made-up bound.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import stats

ESTIMATOR = "numpy linear (Hyndman-Fan type 7)"
CI_METHOD = "distribution-free order-statistic interval (binomial ranks), 95%"
DEFAULT_QUANTILES = (0.5, 0.9, 0.99)


@dataclass(frozen=True, slots=True)
class QuantileEstimate:
    q: float
    value: float
    ci_low: float | None
    ci_high: float | None


def quantile_ci(sorted_values: np.ndarray, q: float, level: float = 0.95):
    """The order-statistic confidence interval of quantile q, or (None, None)."""
    n = len(sorted_values)
    alpha = 1 - level
    low_rank = int(stats.binom.ppf(alpha / 2, n, q))  # 0-based index of the lower bound
    high_rank = int(stats.binom.ppf(1 - alpha / 2, n, q))
    if low_rank < 1 or high_rank >= n:
        return None, None
    return float(sorted_values[low_rank - 1]), float(sorted_values[high_rank])


def describe(values: Any, quantiles: tuple[float, ...] = DEFAULT_QUANTILES) -> dict[str, Any]:
    """Count, mean and quantiles (with 95% CIs) of the finite values given."""
    array = np.asarray(values, dtype=float)
    array = np.sort(array[np.isfinite(array)])
    result: dict[str, Any] = {"count": len(array)}
    if len(array) == 0:
        result.update(mean=None, quantiles=[])
        return result
    result["mean"] = float(array.mean())
    estimates = []
    for q in quantiles:
        low, high = quantile_ci(array, q)
        value = float(np.quantile(array, q, method="linear"))
        estimates.append(asdict(QuantileEstimate(q, value, low, high)))
    result["quantiles"] = estimates
    return result
