"""Training throughput per policy: tokens/s, effective tokens/s and MFU.

tokens/s = tokens / the sum of step times; effective tokens/s = tokens / (the sum of step
times + the time lost to restarts), which is what a job actually gets; MFU is each step's
(a box per policy over its steps). Steps as combined in ``reports.figures.steps``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from moeperf.reports.figures.text import color, empty, plotly_text, styled

COLUMNS = (
    "policy",
    "steps",
    "tokens",
    "step_time_s",
    "lost_s",
    "tokens_per_s",
    "effective_tokens_per_s",
    "mfu_mean",
    "ooms",
    "restarts",
)


def policy_throughput_frame(table: pd.DataFrame) -> pd.DataFrame:
    """One row per policy from ``steps.step_table`` output."""
    if table.empty:
        return pd.DataFrame(columns=COLUMNS)
    grouped = table.groupby("policy", sort=False)
    frame = grouped.agg(
        steps=("step", "size"),
        tokens=("tokens", "sum"),
        step_time_s=("time_s", "sum"),
        lost_s=("lost_s", "sum"),
        mfu_mean=("mfu", "mean"),
        ooms=("ooms", "sum"),
        restarts=("restarts", "sum"),
    ).reset_index()
    with np.errstate(divide="ignore", invalid="ignore"):
        frame["tokens_per_s"] = frame["tokens"] / frame["step_time_s"]
        frame["effective_tokens_per_s"] = frame["tokens"] / (frame["step_time_s"] + frame["lost_s"])
    return frame[list(COLUMNS)]


def policy_throughput(
    per_policy: pd.DataFrame, table: pd.DataFrame, title: str = "Throughput and MFU per policy"
) -> go.Figure:
    """Left: tokens/s and effective tokens/s bars; right: MFU per step as boxes."""
    if per_policy.empty:
        return empty(title, "no steps")
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=("tokens/s (effective: restarts counted)", "MFU per step"),
        horizontal_spacing=0.12,
    )
    names = [plotly_text(p) for p in per_policy["policy"]]
    for index, (column, label) in enumerate(
        (("tokens_per_s", "tokens/s"), ("effective_tokens_per_s", "effective tokens/s"))
    ):
        fig.add_trace(
            go.Bar(
                x=names,
                y=per_policy[column].to_numpy(float),
                name=label,
                marker={"color": color(index)},
                customdata=per_policy["lost_s"].to_numpy(float),
                hovertemplate="%{x}<br>%{y:,.0f} " + label + "<br>%{customdata:.1f} s lost"
                "<extra></extra>",
            ),
            row=1,
            col=1,
        )
    for index, (policy, part) in enumerate(table.groupby("policy", sort=False)):
        mfu = part["mfu"].to_numpy(float)
        if not np.isfinite(mfu).any():
            continue
        fig.add_trace(
            go.Box(
                y=mfu * 100,
                name=plotly_text(policy),
                marker={"color": color(index + 2)},
                boxpoints="outliers",
                showlegend=False,
            ),
            row=1,
            col=2,
        )
    fig.update_layout(barmode="group")
    fig.update_xaxes(type="category", row=1, col=1)
    fig.update_yaxes(title_text="tokens/s", row=1, col=1)
    fig.update_yaxes(title_text="MFU (%)", row=1, col=2)
    return styled(fig, title, height=440)
