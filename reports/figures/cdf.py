"""Latency CDFs: one curve per scenario, downsampled so a million requests stay small.

A curve is the empirical CDF of the raw samples: the k-th smallest of n samples is drawn
at probability (k + 1) / n. Above ``max_points`` samples it keeps only some order
statistics (real samples, never interpolated): three quarters evenly spaced in rank, one
quarter spaced logarithmically in 1 - p from p = 0.9 to the maximum, so p99 and p99.9 stay
resolved; the minimum and the maximum are always kept. The x axis is logarithmic, its
ticks at 1-2-5 steps labelled with their unit ("5 ms 10 ms 20 ms ...").
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pandas as pd
import plotly.graph_objects as go

from moeperf.reports.figures.log_axis import log_ticks
from moeperf.reports.figures.text import color, empty, plotly_text, styled

MAX_POINTS = 2000
CURVE_COLUMNS = ("scenario", "value", "p", "samples")


def _floats(values: npt.ArrayLike) -> np.ndarray:
    """Floating-point samples as given: float32 ITL samples of a million requests stay
    float32 (a float64 copy and its sorted copy cost ~130 MB per load level)."""
    array = np.asarray(values)
    return array if array.dtype.kind == "f" else array.astype(float)


def cdf_points(
    values: npt.ArrayLike, max_points: int = MAX_POINTS
) -> tuple[np.ndarray, np.ndarray]:
    """(values, probabilities) of at most ``max_points`` order statistics of the finite
    ``values``; both empty when there are none."""
    array = _floats(values)
    array = np.sort(array[np.isfinite(array)])
    n = len(array)
    if n <= max_points:
        ranks = np.arange(n)
    else:
        body = max_points * 3 // 4
        tail = max_points - body
        spread = np.round(np.linspace(0, n - 1, body)).astype(np.int64)
        one_minus_p = np.logspace(np.log10(0.1), np.log10(1 / n), tail)
        upper = np.ceil((1 - one_minus_p) * n).astype(np.int64) - 1
        ranks = np.unique(np.clip(np.concatenate([spread, upper]), 0, n - 1))
    return array[ranks], (ranks + 1) / n


def cdf_curves(frame: pd.DataFrame, column: str, max_points: int = MAX_POINTS) -> pd.DataFrame:
    """Curve points per scenario of ``frame[column]`` (columns: scenario, value, p, samples),
    scenarios in order of first appearance."""
    parts = [
        curve_frame(str(scenario), group[column], max_points)
        for scenario, group in frame.groupby("scenario", sort=False)
    ]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=CURVE_COLUMNS)


def curve_frame(scenario: str, values: npt.ArrayLike, max_points: int = MAX_POINTS) -> pd.DataFrame:
    """The curve of one scenario's samples (for callers that compute samples piecewise)."""
    array = _floats(values)
    x, p = cdf_points(array, max_points)
    samples = int(np.isfinite(array).sum())
    return pd.DataFrame({"scenario": scenario, "value": x, "p": p, "samples": samples})


def latency_cdf(
    curves: pd.DataFrame, title: str, *, unit: str = "ms", scale: float = 1e3
) -> go.Figure:
    """One CDF line per scenario from ``cdf_curves`` output (values in seconds, shown
    multiplied by ``scale`` in ``unit``), x on a log axis."""
    if curves.empty:
        return empty(title, "no samples")
    fig = go.Figure()
    for index, (scenario, curve) in enumerate(curves.groupby("scenario", sort=False)):
        samples = int(curve["samples"].iloc[0])
        fig.add_trace(
            go.Scatter(
                x=(curve["value"].to_numpy() * scale).astype(np.float32),
                y=curve["p"].to_numpy().astype(np.float32),
                mode="lines",
                line={"color": color(index), "shape": "hv"},
                name=plotly_text(f"{scenario} (n={samples:,})"),
                hovertemplate=f"%{{x:.3f}} {unit}<br>p=%{{y:.4f}}<extra>%{{fullData.name}}</extra>",
            )
        )
    shown = curves["value"].to_numpy(dtype=float) * scale
    shown = shown[np.isfinite(shown) & (shown > 0)]  # a log axis cannot place 0
    ticks = log_ticks(float(shown.min()), float(shown.max()), unit) if shown.size else None
    fig.update_xaxes(title_text=f"{plotly_text(title)} ({unit}), log scale", type="log")
    if ticks is not None and ticks.values:
        fig.update_xaxes(tickmode="array", tickvals=list(ticks.values), ticktext=list(ticks.labels))
    fig.update_yaxes(title_text="fraction of samples <= x", range=[0, 1.02])
    return styled(fig, f"{title}: CDF per scenario")
