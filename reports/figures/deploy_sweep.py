"""A deployment sweep's Pareto chart (a ``[deploy_sweep]`` run).

One line per arm (a server configuration), one point per load level it ran: x is the
output tokens/s one user sees (1 / TPOT p50 over the level's repeats), y the output
tokens/s per accelerator (output tokens / measured window, the mean over repeats, divided
by the arm's accelerators). Ringed points are on the Pareto front: no other arm and level
is better on both axes. The recommended arm's point at its recommended level is a star.
Values are ``collectors.deploy_sweep_summary``'s; a level without both figures has no point.
"""

from __future__ import annotations

import plotly.graph_objects as go

from moeperf.collectors.deploy_sweep_records import DeploySweepSummary
from moeperf.reports.figures.text import color, empty, plotly_text, styled

TITLE = "Deployment sweep: tokens/s per user against per accelerator"


def deploy_sweep_chart(sweep: DeploySweepSummary, title: str = TITLE) -> go.Figure:
    if not sweep.pareto:
        return empty(title, "no arm measured a level with both figures")
    fig = go.Figure()
    by_arm = {arm.index: arm for arm in sweep.arms}
    for position, arm_index in enumerate(dict.fromkeys(p.arm for p in sweep.pareto)):
        points = sorted((p for p in sweep.pareto if p.arm == arm_index), key=lambda p: p.streams)
        label = plotly_text(by_arm[arm_index].label)
        fig.add_trace(
            go.Scatter(
                x=[p.tok_s_per_user for p in points],
                y=[p.output_tok_s_per_accelerator for p in points],
                text=[f"c={p.streams}" for p in points],
                mode="lines+markers+text",
                textposition="top center",
                name=label,
                line={"color": color(position)},
                marker={
                    "size": [14 if p.on_front else 8 for p in points],
                    "line": {"width": [3 if p.on_front else 0 for p in points], "color": "black"},
                },
                hovertemplate=(
                    "%{text}<br>%{x:,.1f} tok/s per user<br>%{y:,.1f} tok/s per accelerator"
                    f"<extra>{label}</extra>"
                ),
            )
        )
    recommendation = sweep.recommendation
    if recommendation is not None and recommendation.arm is not None:
        chosen = next(
            (p for p in sweep.pareto
             if p.arm == recommendation.arm and p.streams == recommendation.streams),
            None,
        )  # fmt: skip
        if chosen is not None:
            fig.add_trace(
                go.Scatter(
                    x=[chosen.tok_s_per_user],
                    y=[chosen.output_tok_s_per_accelerator],
                    mode="markers",
                    name="recommended",
                    marker={
                        "symbol": "star",
                        "size": 20,
                        "color": "gold",
                        "line": {"width": 1, "color": "black"},
                    },
                    hoverinfo="skip",
                )
            )
    fig.update_xaxes(title_text="output tokens/s per user (1 / TPOT p50)")
    fig.update_yaxes(title_text="output tokens/s per accelerator")
    return styled(fig, title, height=480)
