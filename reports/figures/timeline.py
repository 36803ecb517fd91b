"""The run over time: requests in flight and TTFT p50 / p99, in bins.

Time runs from the first intended send, over every phase (warm-up and cool-down
included, levels one after another). Bins are 1 s wide, wider for long runs so there are
at most ``MAX_BINS``. In flight is the time-weighted mean number of requests between
their actual send and done times within the bin (exact: integrated from the sorted send
and done times). TTFT p50 / p99 are over the ok requests whose intended send falls in the
bin (numpy "linear" estimator); the hover gives their count.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from moeperf.reports.figures.text import empty, plotly_text, styled

MAX_BINS = 600
NS_PER_S = 1e9


def _bin_width_s(duration_s: float, max_bins: int) -> float:
    return max(1.0, math.ceil(duration_s / max_bins))


def _busy_s(starts: np.ndarray, ends: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Request-seconds in flight before each time in ``at``: sum of overlaps of
    [start, end] with (-inf, t]."""
    starts, ends = np.sort(starts), np.sort(ends)
    start_sums = np.concatenate([[0.0], np.cumsum(starts)])
    end_sums = np.concatenate([[0.0], np.cumsum(ends)])
    n_started = np.searchsorted(starts, at, side="right")
    n_ended = np.searchsorted(ends, at, side="right")
    started = at * n_started - start_sums[n_started]
    ended = at * n_ended - end_sums[n_ended]
    return started - ended


def timeline_frame(
    requests: pd.DataFrame, ttft_s: pd.Series, max_bins: int = MAX_BINS
) -> pd.DataFrame:
    """Bins of ``requests`` (intended_send_ns, send_ns, done_ns, status) with their
    per-request ``ttft_s`` (aligned on the index, NaN where undefined): t_s (bin start),
    width_s, in_flight, sent, ttft_p50_s, ttft_p99_s, ttft_count."""
    columns = ["t_s", "width_s", "in_flight", "sent", "ttft_p50_s", "ttft_p99_s", "ttft_count"]
    if requests.empty:
        return pd.DataFrame(columns=columns)
    origin = requests["intended_send_ns"].min()
    intended = (requests["intended_send_ns"].to_numpy(np.int64) - origin) / NS_PER_S
    send = (requests["send_ns"].to_numpy(np.int64) - origin) / NS_PER_S
    done = (requests["done_ns"].to_numpy(np.int64) - origin) / NS_PER_S
    done = np.maximum(done, send)
    duration = float(max(done.max(), intended.max()))
    width = _bin_width_s(duration, max_bins)
    count = max(1, math.ceil(duration / width))
    edges = np.arange(count + 1) * width
    busy = _busy_s(send, done, edges)
    bins = np.minimum((intended // width).astype(np.int64), count - 1)
    ok = (requests["status"] == "ok").to_numpy() & np.isfinite(ttft_s.to_numpy(float))
    ttft = pd.Series(ttft_s.to_numpy(float)[ok]).groupby(bins[ok])
    quantiles = ttft.quantile(np.array([0.5, 0.99])).unstack() if ok.any() else None
    frame = pd.DataFrame(
        {
            "t_s": edges[:-1],
            "width_s": width,
            "in_flight": np.diff(busy) / width,
            "sent": np.bincount(bins, minlength=count),
        }
    )
    frame["ttft_count"] = ttft.size().reindex(frame.index, fill_value=0).to_numpy()
    for q, name in ((0.5, "ttft_p50_s"), (0.99, "ttft_p99_s")):
        values = quantiles[q] if quantiles is not None else pd.Series(dtype=float)
        frame[name] = values.reindex(frame.index).to_numpy(float)
    return frame[columns]


def scenario_starts(requests: pd.DataFrame) -> pd.DataFrame:
    """When each scenario's first request was intended, in seconds from the run's first
    (columns: scenario, t_s), in order."""
    if requests.empty:
        return pd.DataFrame(columns=["scenario", "t_s"])
    origin = requests["intended_send_ns"].min()
    starts = requests.groupby("scenario", sort=False)["intended_send_ns"].min()
    frame = pd.DataFrame({"scenario": starts.index, "t_s": (starts.to_numpy() - origin) / 1e9})
    return frame.sort_values("t_s", ignore_index=True)


def timeline(
    bins: pd.DataFrame, starts: pd.DataFrame | None = None, title: str = "Timeline"
) -> go.Figure:
    """In flight (top) and TTFT p50 / p99 (bottom) per bin; scenario starts marked."""
    if bins.empty:
        return empty(title, "no requests")
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08)
    middle = (bins["t_s"] + bins["width_s"] / 2).to_numpy(float)
    fig.add_trace(
        go.Scatter(
            x=middle,
            y=bins["in_flight"].to_numpy(float),
            mode="lines",
            name="in flight (mean)",
            line={"shape": "hvh"},
            customdata=bins["sent"].to_numpy(),
            hovertemplate="t=%{x:.1f} s<br>%{y:.1f} in flight<br>%{customdata} sent<extra></extra>",
        ),
        row=1,
        col=1,
    )
    for column, name, dash in (
        ("ttft_p50_s", "TTFT p50", "solid"),
        ("ttft_p99_s", "TTFT p99", "dot"),
    ):
        fig.add_trace(
            go.Scatter(
                x=middle,
                y=bins[column].to_numpy(float) * 1e3,
                mode="lines+markers",
                marker={"size": 4},
                name=name,
                line={"dash": dash},
                customdata=bins["ttft_count"].to_numpy(),
                hovertemplate="t=%{x:.1f} s<br>%{y:.2f} ms<br>n=%{customdata}<extra>"
                + name
                + "</extra>",
            ),
            row=2,
            col=1,
        )
    for _, start in (starts if starts is not None else pd.DataFrame()).iterrows():
        fig.add_vline(x=float(start["t_s"]), line={"color": "#999", "dash": "dash", "width": 1})
        fig.add_annotation(
            x=float(start["t_s"]),
            y=1.0,
            yref="paper",
            text=plotly_text(start["scenario"]),
            showarrow=False,
            xanchor="left",
            yanchor="bottom",
            font={"size": 10},
        )
    width = float(bins["width_s"].iloc[0])
    fig.update_xaxes(title_text=f"seconds from the first intended send ({width:g} s bins)", row=2)
    fig.update_yaxes(title_text="requests in flight", row=1)
    fig.update_yaxes(title_text="TTFT (ms)", row=2)
    return styled(fig, title, height=520)
