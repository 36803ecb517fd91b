"""Trend warnings: change points in a metric's history across baseline versions.

The gate compares a candidate with one baseline; a slow drift over many versions, each
step below the minimum effect, passes every gate. This module looks at the series of one
metric's values (one per baseline version, the candidate last) and warns where its level
shifted. Warnings only: it never fails a gate.

Method: e-divisive means (Matteson & James, "A Nonparametric Approach for Multiple Change
Point Analysis of Multivariate Data", JASA 2014), the method of Hunter / Apache Otava,
implemented here in numpy because apache-otava 0.8 pulls in BigQuery, Postgres and Slack
clients and pins numpy and scipy below this project's versions.
- For a split of a segment into X (before) and Y (after), of sizes m and n, the energy
  statistic is Q = m n / (m + n) * (2 mean|x - y| - mean|x - x'| - mean|y - y'|), the
  means over all pairs (distinct pairs within a side). Q is large when the two sides'
  distributions differ; every split is scored in O(1) from one distance matrix.
- The best split's significance is a permutation test: the best Q of the segment
  shuffled ``permutations`` times; p = (1 + #{shuffled >= observed}) / (1 + permutations).
- Binary segmentation: a significant split (p < alpha) is kept and both halves are
  searched again; each side keeps at least ``min_size`` points.
A change point is reported with the mean level before and after it; trend warnings are the
change points among the last ``recent`` points whose relative change is at least
``min_change``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from moeperf.reports.samples import MetricSamples

DEFAULT_PERMUTATIONS = 199
DEFAULT_MIN_SIZE = 2
DEFAULT_RECENT = 5
DEFAULT_MIN_CHANGE = 0.02


@dataclass(frozen=True)
class ChangePoint:
    index: int  # the first point of the new level
    label: str
    p_value: float
    before: float  # mean of the segment before
    after: float  # mean of the segment after

    @property
    def relative_change(self) -> float:
        return self.after / self.before - 1 if self.before else float("inf")


@dataclass(frozen=True)
class TrendWarning:
    metric: str
    change: ChangePoint
    message: str


def _split_scores(d: np.ndarray, min_size: int) -> np.ndarray:
    """Q for every split t (X = [0, t), Y = [t, n)) of the series whose |xi - xj| is d;
    -inf where a side would have fewer than min_size points."""
    n = len(d)
    s = np.zeros((n + 1, n + 1))
    s[1:, 1:] = d.cumsum(0).cumsum(1)  # s[i, j] = sum of d[:i, :j]
    t = np.arange(n + 1)
    within_x = s[t, t] / 2
    between = s[t, n] - s[t, t]
    within_y = (s[n, n] - 2 * s[t, n] + s[t, t]) / 2
    m, k = t.astype(float), (n - t).astype(float)
    scores = np.full(n + 1, -np.inf)
    ok = (t >= min_size) & (n - t >= min_size)
    m, k = m[ok], k[ok]
    pairs_x = np.maximum(m * (m - 1) / 2, 1)
    pairs_y = np.maximum(k * (k - 1) / 2, 1)
    energy = 2 * between[ok] / (m * k) - within_x[ok] / pairs_x - within_y[ok] / pairs_y
    scores[ok] = m * k / (m + k) * energy
    return scores


def _best_split(
    values: np.ndarray, min_size: int, permutations: int, rng: np.random.Generator
) -> tuple[int, float] | None:
    """(split index, p-value) of the best split of ``values``, or None if too short."""
    if len(values) < 2 * min_size:
        return None
    d = np.abs(values[:, None] - values[None, :])
    scores = _split_scores(d, min_size)
    best = int(np.argmax(scores))
    observed = scores[best]
    exceed = 0
    for _ in range(permutations):
        order = rng.permutation(len(values))
        exceed += _split_scores(d[np.ix_(order, order)], min_size).max() >= observed - 1e-12
    return best, (1 + exceed) / (1 + permutations)


def change_points(
    values: Sequence[float] | np.ndarray,
    labels: Sequence[str] | None = None,
    *,
    alpha: float = 0.05,
    min_size: int = DEFAULT_MIN_SIZE,
    permutations: int = DEFAULT_PERMUTATIONS,
    seed: int = 0,
) -> list[ChangePoint]:
    """The significant change points of a series, in order (e-divisive means)."""
    series = np.asarray(values, dtype=float)
    if not np.all(np.isfinite(series)):
        raise ValueError("change_points: the series has missing or non-finite values")
    labels = list(labels) if labels is not None else [str(i) for i in range(len(series))]
    rng = np.random.default_rng(seed)
    found: list[tuple[int, float]] = []
    pending = [(0, len(series))]
    while pending:
        start, end = pending.pop()
        split = _best_split(series[start:end], min_size, permutations, rng)
        if split is None or split[1] >= alpha:
            continue
        at = start + split[0]
        found.append((at, split[1]))
        pending += [(start, at), (at, end)]
    found.sort()
    bounds = [0, *(at for at, _ in found), len(series)]
    return [
        ChangePoint(
            index=at,
            label=labels[at],
            p_value=float(p),
            before=float(series[bounds[i] : at].mean()),
            after=float(series[at : bounds[i + 2]].mean()),
        )
        for i, (at, p) in enumerate(found)
    ]


def metric_history(
    versions: Sequence[tuple[str, Sequence[MetricSamples]]],
) -> dict[str, list[tuple[str, float]]]:
    """Per metric key, (version label, point value) in the order given; a version that
    lacks a metric is skipped for that metric."""
    history: dict[str, list[tuple[str, float]]] = {}
    for label, metrics in versions:
        for metric in metrics:
            if metric.n:
                value = metric.point
                history.setdefault(metric.key, []).append((label, value))
    return history


def trend_warnings(
    history: Mapping[str, Sequence[tuple[str, float]]],
    *,
    recent: int = DEFAULT_RECENT,
    min_change: float = DEFAULT_MIN_CHANGE,
    alpha: float = 0.05,
    directions: Mapping[str, str] | None = None,
    seed: int = 0,
) -> list[TrendWarning]:
    """Warnings for level shifts among the last ``recent`` points of each metric's series
    (the candidate last), at least ``min_change`` in relative size."""
    warnings = []
    for metric, points in history.items():
        labels = [label for label, _ in points]
        values = [value for _, value in points]
        for change in change_points(values, labels, alpha=alpha, seed=seed):
            if change.index < len(values) - recent or abs(change.relative_change) < min_change:
                continue
            direction = (directions or {}).get(metric)
            worse = change.after > change.before if direction == "lower" else None
            if direction == "higher":
                worse = change.after < change.before
            kind = {True: " (worse)", False: " (better)", None: ""}[worse]
            warnings.append(
                TrendWarning(
                    metric,
                    change,
                    f"trend: {metric} shifted {change.relative_change:+.1%}{kind} at "
                    f"{change.label} ({change.before:.4g} -> {change.after:.4g}, "
                    f"e-divisive p={change.p_value:.2g}); a warning, not a failure",
                )
            )
    return warnings
