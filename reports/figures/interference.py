"""Prefill interference against the chunked-prefill size (an ``[interference]`` run).

One x position per arm (the reference target restarted with that chunked-prefill size;
"whole" is size 0, each prompt in one step, drawn last as the largest chunk). Left: the
decoding streams' ITL (``collectors.latency``: one sample per token gap of each ok
request) p50 and p99, alone ("quiet", dashed) and while the long prompts arrive
("mixed", solid), with the 95% intervals of ``collectors.quantiles`` as error bars; the
gap between a mixed and its quiet line is the interference. Right: the long prompts'
TTFT p50 and p99 with their intervals: what a smaller chunk costs them (more steps).
Values come from ``collectors.interference_rows.interference_rows``; a quantile
without samples has no point.
"""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from moeperf.collectors.interference_rows import InterferenceRow
from moeperf.collectors.quantiles import QuantileEstimate
from moeperf.reports.figures.text import color, empty, styled

TITLE = "Prefill interference by chunked-prefill size"


def chunk_label(size: int) -> str:
    return "whole" if size == 0 else str(size)


def ordered(rows: Sequence[InterferenceRow]) -> list[InterferenceRow]:
    """Rows by chunk size, smallest first, whole prompts (0) last."""
    return sorted(rows, key=lambda r: (r.chunked_prefill_size == 0, r.chunked_prefill_size))


def _trace(
    x: list[str],
    estimates: list[QuantileEstimate | None],
    name: str,
    index: int,
    dash: str,
) -> go.Scatter:
    values = [e.value * 1e3 if e else None for e in estimates]
    high = [(e.ci_high - e.value) * 1e3 if e and e.ci_high is not None else 0 for e in estimates]
    low = [(e.value - e.ci_low) * 1e3 if e and e.ci_low is not None else 0 for e in estimates]
    return go.Scatter(
        x=x,
        y=values,
        name=name,
        mode="lines+markers",
        line={"color": color(index), "dash": dash},
        error_y={"type": "data", "symmetric": False, "array": high, "arrayminus": low},
        hovertemplate="chunk %{x}<br>%{y:,.1f} ms<extra>" + name + "</extra>",
    )


def interference_chart(rows: Sequence[InterferenceRow], title: str = TITLE) -> go.Figure:
    if not rows:
        return empty(title, "no arm ran")
    rows = ordered(rows)
    x = [chunk_label(r.chunked_prefill_size) for r in rows]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("decode ITL (ms)", "long-prompt TTFT (ms)"))
    left = (
        ("ITL p99 mixed", [r.mixed_itl_p99_s for r in rows], 0, "solid"),
        ("ITL p99 quiet", [r.quiet_itl_p99_s for r in rows], 0, "dash"),
        ("ITL p50 mixed", [r.mixed_itl_p50_s for r in rows], 1, "solid"),
        ("ITL p50 quiet", [r.quiet_itl_p50_s for r in rows], 1, "dash"),
    )
    for name, estimates, index, dash in left:
        fig.add_trace(_trace(x, estimates, name, index, dash), row=1, col=1)
    right = (
        ("TTFT p99", [r.prefill_ttft_p99_s for r in rows], 2, "solid"),
        ("TTFT p50", [r.prefill_ttft_p50_s for r in rows], 3, "solid"),
    )
    for name, estimates, index, dash in right:
        fig.add_trace(_trace(x, estimates, name, index, dash), row=1, col=2)
    fig.update_xaxes(title_text="chunked-prefill size (tokens per request per step)")
    fig.update_yaxes(type="log", row=1, col=1)
    return styled(fig, title)
