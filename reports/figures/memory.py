"""Peak memory per policy: the distribution of each record's peak device memory (GiB),
one box per policy with every step drawn beside it."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from moeperf.reports.figures.steps import policies
from moeperf.reports.figures.text import color, empty, plotly_text, styled

GIB = 2**30


def peak_memory(steps: pd.DataFrame, title: str = "Peak memory per step") -> go.Figure:
    """Box plots of ``peak_memory_bytes`` per policy, in GiB (records without it skipped)."""
    peak = pd.to_numeric(steps["peak_memory_bytes"], errors="coerce") if len(steps) else None
    if peak is None or peak.isna().all():
        return empty(title, "no peak memory recorded")
    frame = pd.DataFrame({"policy": policies(steps), "gib": peak / GIB}).dropna()
    fig = go.Figure()
    for index, (policy, part) in enumerate(frame.groupby("policy", sort=False)):
        fig.add_trace(
            go.Box(
                y=part["gib"].to_numpy(float),
                name=plotly_text(policy),
                boxpoints="all",
                jitter=0.4,
                pointpos=0,
                marker={"size": 3, "color": color(index)},
                showlegend=False,
            )
        )
    fig.update_yaxes(title_text="peak memory (GiB)")
    return styled(fig, title)
