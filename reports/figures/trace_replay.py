"""A trace replay's arrival pattern: the trace's send times against the achieved ones.

From the request records of each trace level (a scenario whose summary has a
``trace_replay``), every phase: a request's intended send time is the trace's time divided
by the speed-up, from the level's start (``intended_send_ns``); its actual one,
``send_ns`` (a request never sent, ``send_ns`` 0, has no actual send). Left: requests per
bin of ``BIN_S`` seconds (wider, a multiple of it, where the level would need more than
``MAX_BINS`` bins; every level of the chart has the same width) against the time since the
level's first send, the trace's (dashed) and the achieved (solid), one colour per level;
where the client kept up, the two coincide. Right: the distribution (CDF) of the send lag,
actual send - intended send in ms (``collectors.workload_summary``), at most ``LAG_POINTS``
points per level (its quantiles at evenly spaced levels).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from moeperf.collectors.latency import NS_PER_S
from moeperf.reports.figures.text import color, empty, plotly_text, styled

TITLE = "Trace replay: the trace's sends against the achieved ones"
BIN_S = 0.5
MAX_BINS = 2_000
LAG_POINTS = 500


@dataclass(frozen=True, slots=True, eq=False)
class ArrivalSeries:
    """One trace level's sends per bin, intended and actual, and its send lags."""

    scenario: str
    bin_s: float
    starts_s: np.ndarray  # each bin's start, seconds since the level's first send
    intended: np.ndarray  # requests whose intended send falls in the bin
    actual: np.ndarray  # requests sent in the bin
    lag_ms: np.ndarray  # actual - intended send of every sent request, sorted


def _times(requests: pd.DataFrame, scenario: str) -> tuple[np.ndarray, np.ndarray]:
    """The intended send of every record of ``scenario``, and (intended, actual) of those
    sent, in ns from the run's anchor."""
    rows = requests.loc[requests["scenario"] == scenario, ["intended_send_ns", "send_ns"]]
    intended = rows["intended_send_ns"].to_numpy(np.int64)
    sent = rows[rows["send_ns"] > 0]
    return intended, sent[["intended_send_ns", "send_ns"]].to_numpy(np.int64)


def bin_width(span_s: float) -> float:
    """``BIN_S``, or the smallest multiple of it that keeps ``span_s`` within MAX_BINS."""
    return BIN_S * max(1, math.ceil(span_s / BIN_S / MAX_BINS))


def arrival_series(requests: pd.DataFrame, scenarios: Sequence[str]) -> list[ArrivalSeries]:
    """The series of each of ``scenarios`` (in that order) from a run's request records."""
    times = {name: _times(requests, name) for name in scenarios}
    origins, spans = {}, []
    for name, (intended, sent) in times.items():
        every = np.concatenate([intended, sent[:, 1]])
        origins[name] = int(every.min()) if len(every) else 0
        spans.append((int(every.max()) - origins[name]) / NS_PER_S if len(every) else 0.0)
    width = bin_width(max(spans, default=0.0))
    out = []
    for name, (intended, sent) in times.items():
        origin = origins[name]
        span = max(intended.max(initial=origin), sent[:, 1].max(initial=origin)) - origin
        edges = np.arange(math.floor(span / NS_PER_S / width) + 2) * width
        out.append(
            ArrivalSeries(
                scenario=name,
                bin_s=width,
                starts_s=edges[:-1],
                intended=np.histogram((intended - origin) / NS_PER_S, edges)[0],
                actual=np.histogram((sent[:, 1] - origin) / NS_PER_S, edges)[0],
                lag_ms=np.sort((sent[:, 1] - sent[:, 0]) / 1e6),
            )
        )
    return out


def _cdf(sorted_ms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(lag ms, share of sends at or below it), at most LAG_POINTS points."""
    n = len(sorted_ms)
    if n <= LAG_POINTS:
        return sorted_ms, np.arange(1, n + 1) / n
    shares = np.linspace(1 / n, 1.0, LAG_POINTS)
    return np.quantile(sorted_ms, shares), shares


def trace_replay_chart(series: Sequence[ArrivalSeries], title: str = TITLE) -> go.Figure:
    """Left: sends per bin, trace (dashed) and achieved (solid); right: send-lag CDFs."""
    drawn = [s for s in series if s.intended.sum() or s.actual.sum()]
    if not drawn:
        return empty(title, "no trace level has request records")
    width = drawn[0].bin_s
    fig = make_subplots(
        rows=1,
        cols=2,
        column_widths=[0.65, 0.35],
        horizontal_spacing=0.1,
        subplot_titles=(f"sends per {width:g} s", "send lag (actual - intended)"),
    )
    for index, s in enumerate(drawn):
        name = plotly_text(s.scenario)
        hue = color(index)
        for label, counts, dash in (("trace", s.intended, "dash"), ("sent", s.actual, "solid")):
            fig.add_trace(
                go.Scatter(
                    x=s.starts_s,
                    y=counts,
                    name=f"{name}: {label}",
                    legendgroup=name,
                    mode="lines",
                    line={"color": hue, "dash": dash, "shape": "hv"},
                    hovertemplate=f"%{{x:g}} s: %{{y}} {label}<extra>{name}</extra>",
                ),
                row=1,
                col=1,
            )
        if len(s.lag_ms):
            x, y = _cdf(s.lag_ms)
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=y,
                    name=f"{name}: send lag",
                    legendgroup=name,
                    showlegend=False,
                    mode="lines",
                    line={"color": hue},
                    hovertemplate=f"%{{y:.1%}} within %{{x:.2f}} ms<extra>{name}</extra>",
                ),
                row=1,
                col=2,
            )
    fig.update_xaxes(title_text="seconds since the level's first send", row=1, col=1)
    fig.update_yaxes(title_text=f"requests per {width:g} s", rangemode="tozero", row=1, col=1)
    fig.update_xaxes(title_text="send lag ms", row=1, col=2)
    fig.update_yaxes(title_text="share of sends", range=[0, 1.02], tickformat=".0%", row=1, col=2)
    return styled(fig, title, height=460)
