"""OOM and restart events on the training timeline.

Each policy's step times are drawn against time (seconds from the first step's start);
its events sit on the same time axis in a lane below: OOMs as crosses, restarts as
diamonds, with the time each restart lost in the hover.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from moeperf.reports.figures.text import color, empty, plotly_text, styled

SYMBOLS = {"oom": "x", "restart": "diamond"}


def training_timeline(
    table: pd.DataFrame, events: pd.DataFrame, title: str = "Steps, OOMs and restarts"
) -> go.Figure:
    """Step time per policy (top) and the events (bottom) against time."""
    if table.empty:
        return empty(title, "no steps")
    fig = make_subplots(
        rows=2, cols=1, shared_xaxes=True, row_heights=[0.7, 0.3], vertical_spacing=0.06
    )
    for index, (policy, part) in enumerate(table.groupby("policy", sort=False)):
        fig.add_trace(
            go.Scatter(
                x=part["start_s"].to_numpy(float),
                y=part["time_s"].to_numpy(float),
                mode="lines",
                name=plotly_text(policy),
                line={"color": color(index)},
                customdata=part["step"].to_numpy(),
                hovertemplate="step %{customdata}<br>%{y:.3f} s<extra>%{fullData.name}</extra>",
            ),
            row=1,
            col=1,
        )
    for kind, part in events.groupby("kind", sort=False):
        lanes = [
            plotly_text(f"{p}: {k}") for p, k in zip(part["policy"], part["kind"], strict=True)
        ]
        hover = [
            plotly_text(
                f"step {s}, rank {r}: {k}"
                + (f", {lost:.1f} s lost" if lost else "")
                + (f" ({d})" if d else "")
            )
            for s, r, k, lost, d in zip(
                part["step"],
                part["rank"],
                part["kind"],
                part["lost_s"],
                part["detail"],
                strict=True,
            )
        ]
        fig.add_trace(
            go.Scatter(
                x=part["t_s"].to_numpy(float),
                y=lanes,
                mode="markers",
                name=plotly_text(kind),
                marker={"symbol": SYMBOLS.get(str(kind), "circle"), "size": 11},
                text=hover,
                hovertemplate="t=%{x:.1f} s<br>%{text}<extra></extra>",
            ),
            row=2,
            col=1,
        )
    if events.empty:
        fig.add_annotation(
            text="no OOMs or restarts", showarrow=False, x=0.5, y=0.1, xref="paper", yref="paper"
        )
    fig.update_yaxes(title_text="step time (s)", row=1, col=1)
    fig.update_yaxes(type="category", row=2, col=1)
    fig.update_xaxes(title_text="seconds from the first step's start", row=2, col=1)
    end = float(np.nanmax(table["start_s"] + table["time_s"]))
    fig.update_xaxes(range=[0, end * 1.02 if end > 0 else 1])
    return styled(fig, title, height=520)
