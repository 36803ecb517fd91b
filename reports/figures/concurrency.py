"""The concurrency curve: output tokens/s against latency, one point per load level.

Left: TTFT p50 and p99; right: TPOT p50 and p99 (both from the run's summary, i.e.
``collectors.summary``). A level is on the Pareto front of a line when no other level of
that line has at least its throughput and at most its latency, and is strictly better in
one of the two (maximize throughput, minimize latency); front points are ringed.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from moeperf.collectors.quantiles import Described
from moeperf.collectors.serving_records import ScenarioSummary
from moeperf.reports.figures.text import color, empty, plotly_text, styled

SERIES = (
    ("ttft_p50_s", "TTFT p50", 1),
    ("ttft_p99_s", "TTFT p99", 1),
    ("tpot_p50_s", "TPOT p50", 2),
    ("tpot_p99_s", "TPOT p99", 2),
)


def pareto_front(throughput: npt.ArrayLike, latency: npt.ArrayLike) -> np.ndarray:
    """Mask of the points no other point dominates (higher-or-equal throughput and
    lower-or-equal latency, strictly better in one). Points with a NaN are never on it."""
    x = np.asarray(throughput, dtype=float)
    y = np.asarray(latency, dtype=float)
    valid = np.isfinite(x) & np.isfinite(y)
    # dominated[i, j]: point j dominates point i.
    no_worse = (x[None, :] >= x[:, None]) & (y[None, :] <= y[:, None])
    better = (x[None, :] > x[:, None]) | (y[None, :] < y[:, None])
    dominated = (no_worse & better & valid[None, :]).any(axis=1)
    return valid & ~dominated


def _quantile(described: Described, q: float) -> float:
    value = described.value_at(q)
    return float("nan") if value is None else value


def levels_frame(scenarios: Mapping[str, ScenarioSummary]) -> pd.DataFrame:
    """One row per load level from the summary's ``scenarios``: scenario,
    output_tok_s, ok, ttft_p50_s, ttft_p99_s, tpot_p50_s, tpot_p99_s (NaN if unknown)."""
    rows = []
    for scenario, entry in scenarios.items():
        latency = entry.latency_s
        throughput = entry.output_throughput_tok_s
        rows.append(
            {
                "scenario": scenario,
                "output_tok_s": float("nan") if throughput is None else float(throughput),
                "ok": entry.ok,
                "ttft_p50_s": _quantile(latency.ttft_s, 0.5),
                "ttft_p99_s": _quantile(latency.ttft_s, 0.99),
                "tpot_p50_s": _quantile(latency.tpot_s, 0.5),
                "tpot_p99_s": _quantile(latency.tpot_s, 0.99),
            }
        )
    return pd.DataFrame(
        rows,
        columns=["scenario", "output_tok_s", "ok"] + [column for column, _, _ in SERIES],
    )


def concurrency_curve(levels: pd.DataFrame, title: str = "Throughput against latency") -> go.Figure:
    """Two panels (TTFT, TPOT) of ``levels_frame`` output, latencies in ms."""
    if levels.empty or not np.isfinite(levels["output_tok_s"].to_numpy(float)).any():
        return empty(title, "no load level has a throughput")
    fig = make_subplots(rows=1, cols=2, subplot_titles=("TTFT", "TPOT"), horizontal_spacing=0.1)
    labels = [plotly_text(s) for s in levels["scenario"]]
    x = levels["output_tok_s"].to_numpy(float)
    for index, (column, name, col) in enumerate(SERIES):
        y = levels[column].to_numpy(float)
        dash = "solid" if "p50" in column else "dot"
        fig.add_trace(
            go.Scatter(
                x=x,
                y=y * 1e3,
                mode="lines+markers+text",
                text=labels,
                textposition="top center",
                name=name,
                line={"color": color(index // 2), "dash": dash},
                hovertemplate="%{text}<br>%{x:.1f} tok/s<br>%{y:.2f} ms<extra>" + name + "</extra>",
            ),
            row=1,
            col=col,
        )
        front = pareto_front(x, y)
        fig.add_trace(
            go.Scatter(
                x=x[front],
                y=y[front] * 1e3,
                mode="markers",
                marker={"size": 16, "symbol": "circle-open", "color": color(index // 2)},
                name=f"{name} Pareto front",
                hoverinfo="skip",
            ),
            row=1,
            col=col,
        )
    for col in (1, 2):
        fig.update_xaxes(title_text="output tokens/s", row=1, col=col)
    fig.update_yaxes(title_text="TTFT (ms)", row=1, col=1)
    fig.update_yaxes(title_text="TPOT (ms)", row=1, col=2)
    return styled(fig, title, height=460)
