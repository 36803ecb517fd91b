"""TTFT by conversation turn (a multi-turn workload), and how much of each turn was cached.

From each scenario's ``turns`` (``collectors.workload_summary.turn_summaries``: its measured
ok requests grouped by their turn index in the conversation, 1 = the first message). Top:
TTFT p50 (``collectors.latency``, ``collectors.quantiles``) against the turn index, one line
per scenario, its 95% interval as error bars (none with too few samples). Bottom, the same
colours: the turn's cached share, prompt tokens the server said its prefix cache held /
prompt tokens, over the turn's requests (its usage's prompt_tokens_details.cached_tokens);
no point where the server did not say. Turn k sends the history so far with a new message,
so its prompt grows with k; a cache that keeps the history makes TTFT grow far less.
"""

from __future__ import annotations

from collections.abc import Mapping

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from moeperf.collectors.serving_records import ScenarioSummary
from moeperf.collectors.workload_records import TurnSummary
from moeperf.reports.figures.text import color, empty, plotly_text, styled

TITLE = "TTFT by conversation turn"
NO_CACHED = "the server's usage did not say how many prompt tokens were cached"


def ttft_ms(turns: tuple[TurnSummary, ...]) -> tuple[list[float | None], list[float], list[float]]:
    """TTFT p50 ms per turn, and the distances to its interval's ends (0: no interval)."""
    values: list[float | None] = []
    above: list[float] = []
    below: list[float] = []
    for turn in turns:
        estimate = turn.ttft_s.at(0.5)
        values.append(None if estimate is None else estimate.value * 1e3)
        if estimate is None or estimate.ci_low is None or estimate.ci_high is None:
            above.append(0.0)
            below.append(0.0)
        else:
            above.append((estimate.ci_high - estimate.value) * 1e3)
            below.append((estimate.value - estimate.ci_low) * 1e3)
    return values, above, below


def turns_chart(scenarios: Mapping[str, ScenarioSummary], title: str = TITLE) -> go.Figure:
    """Two panels sharing the turn axis: TTFT p50 (ms), then the cached share (0-1)."""
    with_turns = [(name, entry.turns) for name, entry in scenarios.items() if entry.turns]
    if not with_turns:
        return empty(title, "no scenario has conversation turns")
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.1,
        row_heights=[0.65, 0.35],
        subplot_titles=("TTFT p50 (ms), 95% interval", "cached share of the prompt"),
    )
    any_cached = False
    for index, (scenario, turns) in enumerate(with_turns):
        name = plotly_text(scenario)
        x = [turn.turn for turn in turns]
        values, above, below = ttft_ms(turns)
        requests = [turn.requests for turn in turns]
        fig.add_trace(
            go.Scatter(
                x=x,
                y=values,
                name=name,
                legendgroup=name,
                mode="lines+markers",
                line={"color": color(index)},
                error_y={"type": "data", "symmetric": False, "array": above, "arrayminus": below},
                customdata=requests,
                hovertemplate="turn %{x}<br>TTFT p50 %{y:,.1f} ms<br>%{customdata} requests"
                f"<extra>{name}</extra>",
            ),
            row=1,
            col=1,
        )
        cached = [turn.cached_ratio for turn in turns]
        any_cached = any_cached or any(c is not None for c in cached)
        fig.add_trace(
            go.Scatter(
                x=x,
                y=cached,
                name=f"{name}: cached share",
                legendgroup=name,
                showlegend=False,
                mode="lines+markers",
                line={"color": color(index), "dash": "dot"},
                hovertemplate=f"turn %{{x}}<br>%{{y:.1%}} cached<extra>{name}</extra>",
            ),
            row=2,
            col=1,
        )
    if not any_cached:
        fig.add_annotation(
            text=plotly_text(NO_CACHED),
            showarrow=False,
            x=0.5,
            y=0.5,
            xref="x2 domain",
            yref="y2 domain",
        )
    fig.update_xaxes(dtick=1)
    fig.update_xaxes(title_text="turn index (1 = the conversation's first message)", row=2, col=1)
    fig.update_yaxes(title_text="TTFT p50 ms", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="cached", range=[0, 1.05], tickformat=".0%", row=2, col=1)
    return styled(fig, title, height=560)
