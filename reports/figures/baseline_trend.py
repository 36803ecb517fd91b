"""Baseline trend: each metric across baseline versions, with its confidence interval.

From plain columns ``version``, ``created``, ``metric``, ``value``, ``ci_low``,
``ci_high``: one panel per metric (their units differ), versions in order of creation.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from moeperf.reports.figures.text import color, empty, plotly_text, styled

REQUIRED = ("version", "created", "metric", "value", "ci_low", "ci_high")


def baseline_trend(frame: pd.DataFrame, title: str = "Baseline trend") -> go.Figure:
    """A line per metric across versions (x: versions ordered by ``created``)."""
    missing = [c for c in REQUIRED if c not in frame.columns]
    if missing:
        raise ValueError(f"baseline_trend needs columns {', '.join(missing)}")
    if frame.empty:
        return empty(title, "no baselines")
    frame = frame.assign(_created=pd.to_datetime(frame["created"], utc=True, errors="coerce"))
    versions = (
        frame.sort_values("_created", kind="stable").drop_duplicates("version")["version"].tolist()
    )
    metrics = list(dict.fromkeys(frame["metric"]))
    fig = make_subplots(
        rows=len(metrics),
        cols=1,
        shared_xaxes=True,
        vertical_spacing=min(0.08, 0.3 / len(metrics)),
        subplot_titles=[plotly_text(m) for m in metrics],
    )
    categories = [plotly_text(v) for v in versions]
    for row, metric in enumerate(metrics, start=1):
        part = frame[frame["metric"] == metric].drop_duplicates("version", keep="last")
        part = part.set_index("version").reindex(versions)
        value = part["value"].to_numpy(float)
        fig.add_trace(
            go.Scatter(
                x=categories,
                y=value,
                mode="lines+markers",
                name=plotly_text(metric),
                line={"color": color(row - 1)},
                connectgaps=True,
                error_y={
                    "type": "data",
                    "symmetric": False,
                    "array": np.nan_to_num(part["ci_high"].to_numpy(float) - value),
                    "arrayminus": np.nan_to_num(value - part["ci_low"].to_numpy(float)),
                    "thickness": 1,
                },
                showlegend=False,
            ),
            row=row,
            col=1,
        )
    fig.update_xaxes(type="category", categoryorder="array", categoryarray=categories)
    fig.update_xaxes(title_text="baseline version (oldest first)", row=len(metrics), col=1)
    return styled(fig, title, height=120 + 220 * len(metrics))
