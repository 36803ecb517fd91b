"""The statistics of the gate: bootstrap ratio intervals, rank tests, FDR, minimum effects.

Conventions: ``a`` is the baseline, ``b`` the candidate, and a ratio is always
statistic(b) / statistic(a). A statistic is "mean", "median" or "pNN" (a percentile, e.g.
"p99", "p99.9"), computed with numpy's "linear" estimator as in ``collectors.quantiles``,
or "tokens/window" (``RATE_STATISTIC``): a total over requests divided by the level's
measured window, the headline output tokens/s of ``collectors.summary``. That one is a
single number per level, reported and never tested: its run-to-run spread comes mostly
from how the window's ends fall on the requests (a closed loop's streams start together,
so one more request that just makes the window stretches it by a whole request), which no
resampling of one run's requests sees.

Bootstrap (percentile method, baseline and candidate resampled independently):
- percentiles and the median are drawn from their exact bootstrap distribution rather
  than by materialising resamples. Sorting a resample of ``x`` (n values, sorted) gives
  ``x[floor(U_(j) * n)]`` for the order statistics U_(j) of n uniforms, and U_(j) ~
  Beta(j, n - j + 1); the next one is U_(j) + (1 - U_(j)) * Beta(1, n - j). Two Beta
  draws per resample give the two order statistics the linear estimator interpolates, so
  2000 resamples cost the same for 50 samples or 5 million.
- means are resampled (vectorized, in chunks); arrays above ``MEAN_RESAMPLE_CAP`` are
  first subsampled without replacement to the cap with the generator given. A smaller
  sample widens the interval, so the cap errs towards "inconclusive", never "regression".

Tests (one-sided, in the direction of a regression):
- the median, p50 and mean: Mann-Whitney U (scipy, asymptotic with tie correction for
  large samples), whether the candidate's values are stochastically worse;
- other percentiles: the Brown-Mood quantile test: the count of each side's values above
  the pooled sample's percentile, compared with Fisher's exact test on that 2x2 table. A
  rank test of the whole distribution misses a regression confined to the tail; this one
  asks about the percentile itself, and is exact under exchangeability (the pooled
  threshold does not depend on the labels).
Both treat samples as independent. Per-token and per-request samples of one run are
correlated, so the nominal alpha is a lower bound on the real false-positive rate; the
minimum effect guards against that, and A/A runs (``moeperf.gate_calibration``) measure it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Literal

import numpy as np
import numpy.typing as npt

from moeperf.collectors.bootstrap import MEAN_RESAMPLE_CAP as MEAN_RESAMPLE_CAP
from moeperf.collectors.bootstrap import RATE_STATISTIC as RATE_STATISTIC
from moeperf.collectors.bootstrap import bootstrap_ratio_ci as bootstrap_ratio_ci
from moeperf.collectors.bootstrap import bootstrap_statistic as bootstrap_statistic
from moeperf.collectors.bootstrap import quantile_of as quantile_of
from moeperf.collectors.min_effects import DEFAULT_MIN_EFFECTS as DEFAULT_MIN_EFFECTS
from moeperf.collectors.min_effects import METRIC_CLASSES as METRIC_CLASSES
from moeperf.collectors.min_effects import MIN_EFFECT_KEYS as MIN_EFFECT_KEYS
from moeperf.collectors.quantiles import quantile_ci

# A change smaller than a minimum effect is not material, whatever its significance. The
# defaults per metric class, with their reasons, are in collectors/min_effects.py (imported
# above; the spec's [gate] table validates its keys there too); this one is for a class
# that has none.
FALLBACK_MIN_EFFECT = 0.05
# No statistic is compared on fewer samples than this (per side).
MIN_SAMPLES = 8
# Percentiles also need enough samples that their 95% order-statistic interval
# (collectors.quantiles.quantile_ci) exists: 36 for p90, 368 for p99, 3688 for p99.9.
PERCENTILE_CI_LEVEL = 0.95
# scipy's ``alternative`` of a test.
Alternative = Literal["two-sided", "less", "greater"]


def point_value(values: np.ndarray, statistic: str) -> float:
    """The statistic of plain samples ("tokens/window" needs its window: ``rate_of_totals``)."""
    if statistic == RATE_STATISTIC:
        raise ValueError(f"{RATE_STATISTIC} is a rate of totals: use rate_of_totals")
    q = quantile_of(statistic)
    values = np.asarray(values, dtype=float)
    if not len(values):
        return math.nan
    return float(values.mean() if q is None else np.quantile(values, q, method="linear"))


@functools.lru_cache(maxsize=64)
def min_samples(statistic: str) -> int:
    """The fewest samples per side the gate compares ``statistic`` on (documented above)."""
    q = quantile_of(statistic)
    if q is None:
        return MIN_SAMPLES
    n = 2
    while quantile_ci(np.arange(n, dtype=float), q, PERCENTILE_CI_LEVEL)[0] is None:
        n += 1 if n < 64 else max(1, n // 64)
    # The stepped search may overshoot by < 1.6%; walk back to the exact minimum.
    while n > 2 and quantile_ci(np.arange(n - 1.0), q, PERCENTILE_CI_LEVEL)[0] is not None:
        n -= 1
    return max(n, MIN_SAMPLES)


def min_effect_for(
    name: str, statistic: str, metric_class: str, overrides: Mapping[str, float] | None = None
) -> float:
    """The minimum effect: the first of "name statistic", "name", "metric_statistic" (the
    name without its level, "c=32/ttft_s" -> "ttft_s_p99"), "class_statistic" and "class"
    found in ``overrides``, else in ``DEFAULT_MIN_EFFECTS`` (so an override of a class
    applies to its tail percentiles too)."""
    metric = name.rpartition("/")[2]
    keys = (
        f"{name} {statistic}",
        name,
        f"{metric}_{statistic}",
        f"{metric_class}_{statistic}",
        metric_class,
    )
    for table in (overrides or {}, DEFAULT_MIN_EFFECTS):
        for key in keys:
            if key in table:
                return float(table[key])
    return FALLBACK_MIN_EFFECT


def rate_of_totals(tokens: np.ndarray, window_s: float) -> float:
    """tokens / window: the headline rate, "tokens/window" (NaN without a window)."""
    return float(np.sum(tokens) / window_s) if window_s > 0 else math.nan


def _worse(direction: str | None) -> Alternative:
    """scipy's ``alternative`` for "b is worse than a", or two-sided for None."""
    if direction is None:
        return "two-sided"
    if direction not in ("lower", "higher"):
        raise ValueError(f"direction must be 'lower' or 'higher', got {direction!r}")
    return "greater" if direction == "lower" else "less"


def mann_whitney(a: np.ndarray, b: np.ndarray, direction: str | None) -> float:
    """p-value that the candidate ``b`` is stochastically worse than the baseline ``a``
    (one-sided; ``direction`` says which way is better), or two-sided for None."""
    from scipy import stats  # a second to import: only a test pays it, not every report

    return float(stats.mannwhitneyu(b, a, alternative=_worse(direction)).pvalue)


def quantile_test(a: np.ndarray, b: np.ndarray, q: float, direction: str | None) -> float:
    """Brown-Mood test of the q-quantile: p-value that ``b``'s is worse than ``a``'s."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    threshold = np.quantile(np.concatenate([a, b]), q, method="linear")
    table = np.array(
        [
            [int((b > threshold).sum()), int((b <= threshold).sum())],
            [int((a > threshold).sum()), int((a <= threshold).sum())],
        ]
    )
    # Rows: candidate, baseline. "greater" odds: the candidate has more values above.
    from scipy import stats  # a second to import: only a test pays it, not every report

    return float(stats.fisher_exact(table, alternative=_worse(direction)).pvalue)


def rank_test(
    a: np.ndarray, b: np.ndarray, statistic: str, direction: str | None
) -> tuple[float, str]:
    """(p-value, test name) of the test the gate uses for ``statistic``."""
    q = quantile_of(statistic)
    if q is None or q == 0.5:
        return mann_whitney(a, b, direction), "mann-whitney"
    return quantile_test(a, b, q, direction), "brown-mood quantile (fisher exact)"


def benjamini_hochberg(pvalues: npt.ArrayLike) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values (q-values), in the order given."""
    p = np.asarray(pvalues, dtype=float)
    if not len(p):
        return p
    from scipy import stats  # a second to import: only a test pays it, not every report

    if hasattr(stats, "false_discovery_control"):
        return np.asarray(stats.false_discovery_control(p, method="bh"))
    order = np.argsort(p)
    ranked = p[order] * len(p) / np.arange(1, len(p) + 1)
    adjusted = np.minimum.accumulate(ranked[::-1])[::-1]
    out = np.empty_like(p)
    out[order] = np.minimum(adjusted, 1.0)
    return out
