"""A sweep over prompt lengths ([sweep]): latency, prefill rate and KV-cache use against
the prompt length, one line per load level.

A point is one (prompt length, load level) scenario that was sent
(``collectors.sweep_records``), its numbers those of its
``collectors.serving_records.ScenarioSummary`` (measured ok requests). Four panels, x in
each the prompt tokens of the scenario (``input_tokens``: every request's prompt is that
long) on a log axis; one colour per load level, the same in every panel:

- (a) TTFT p50 (TTFT: ``collectors.latency``; p50 and its 95% interval, the error bar:
  ``collectors.quantiles``) and, dashed, TTFT p99, in ms on a log axis.
- (b) prefill tokens/s per request: prompt tokens / TTFT p50, its error bar the TTFT p50's
  interval inverted (prompt tokens / its upper bound .. / its lower bound); dashed, total
  prompt tokens/s: prompt tokens x ok measured requests / the measured window (both as
  ``collectors.prefill`` defines them).
- (c) TPOT p50 in ms with its 95% interval. Where no level has a TPOT p50 (a sweep of one
  output token per request, the prefill suite: TPOT needs two), the panel says so.
- (d) the target's KV cache at the level's highest scrape of its /metrics
  (``collectors.target_counters``): the blocks in use (highest usage ratio x the blocks
  the target states) where any level has that count, else the highest usage in percent
  of the cache; the axis title says which. Where no level has either, the panel says
  "KV-cache usage: not available from this target". Where the target states bytes (the
  reference target), the panel is the KV bytes in use at the highest scrape, in MiB, and
  with a hybrid model's linear-attention state (dashed: bytes its running requests hold,
  flat in the context) both on a log axis.
  With ``[plan]`` (``collectors.sweep_records.SweepPlan``), beside each concurrency level c
  a black dotted line with crosses: the memory planner's c x ceil((prompt + output tokens) /
  block tokens) blocks (in percent of the cache's blocks when the panel is a percentage):
  an estimate from the model's config, not a measurement.

A point of a level whose status is not "ok" (failed or invalid: its numbers cover only
the requests that finished) is a hollow marker; a level without a number for a panel has
no point there. A prompt length the target cannot hold (its prompt and the most output
tokens a request asks for exceed the context limit) was never sent: it is a grey dotted
vertical line at that length in every panel, labelled "not available" at the top of (a)
and "n/a" in the others; hovering a label shows the reason.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from moeperf.collectors.sweep_records import SweepPlan, SweepPointSummary
from moeperf.collectors.target_counters import NOT_AVAILABLE
from moeperf.reports.figures.log_axis import log_ticks
from moeperf.reports.figures.sweep_frame import MIB, kv_panel
from moeperf.reports.figures.text import color, empty, plotly_text, styled

TITLE = "Sweep over prompt lengths"
PANELS = (
    "(a) TTFT p50 (dashed: p99)",
    "(b) prefill tok/s per request, p50 (dashed: total)",
    "(c) TPOT p50",
    "(d) KV cache at the highest scrape",
)
NO_TPOT = "no TPOT: one output token per request"
NO_KV = f"KV-cache usage: {NOT_AVAILABLE}"
NOT_SENT_COLOR = "#9e9e9e"
# Room on either side of the lengths (log10 units), so the lines at the ends stay visible.
X_PAD_DECADES = 0.1


def _levels(frame: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """(level name, its rows by prompt length) per load level, lowest level first."""
    order = frame.groupby("level_name", sort=False)["level"].min().sort_values(na_position="last")
    return [
        (str(name), frame[frame["level_name"] == name].sort_values("input_tokens"))
        for name in order.index
    ]


def _errors(values: np.ndarray, low: np.ndarray, high: np.ndarray) -> dict[str, object]:
    return {
        "type": "data",
        "symmetric": False,
        "array": high - values,
        "arrayminus": values - low,
        "thickness": 1,
    }


def _axis_refs(panel: int) -> tuple[str, str]:
    """The x and y axis names of panel 1-4 (make_subplots numbers them row by row)."""
    suffix = "" if panel == 1 else str(panel)
    return f"x{suffix}", f"y{suffix}"


def _note(fig: go.Figure, panel: int, text: str) -> None:
    """A message in the middle of a panel that has nothing to draw."""
    x, y = _axis_refs(panel)
    fig.add_annotation(
        text=plotly_text(text),
        showarrow=False,
        x=0.5,
        y=0.5,
        xref=f"{x} domain",
        yref=f"{y} domain",
    )


def _not_sent(fig: go.Figure, points: Sequence[SweepPointSummary]) -> None:
    """A dotted line per length not sent, in every panel, with its reason on hover."""
    for point in points:
        reason = plotly_text(point.not_available or NOT_AVAILABLE)
        for panel in range(1, 5):
            row, col = (panel - 1) // 2 + 1, (panel - 1) % 2 + 1
            fig.add_vline(
                x=point.input_tokens,
                line_dash="dot",
                line_color=NOT_SENT_COLOR,
                row=row,
                col=col,
                # Panel (c) of a prefill sweep has no trace, and still needs the line.
                exclude_empty_subplots=False,
            )
            x, y = _axis_refs(panel)
            fig.add_annotation(
                text="not available" if panel == 1 else "n/a",
                hovertext=reason,
                showarrow=False,
                # Annotations on a log axis are placed by log10 of the value (shapes are not).
                x=math.log10(point.input_tokens),
                xref=x,
                y=1,
                yref=f"{y} domain",
                textangle=-90,
                xanchor="right",
                yanchor="top",
                font={"size": 10, "color": "#616161"},
            )


def _hover(part: pd.DataFrame, what: str) -> tuple[np.ndarray, str]:
    custom = np.array(
        [
            [plotly_text(s), plotly_text(t)]
            for s, t in zip(part["scenario"], part["status"], strict=True)
        ],
        dtype=object,
    )
    template = "%{customdata[0]} (%{customdata[1]})<br>%{x:,} prompt tokens<br>" + what
    return custom, template


def _series(
    fig: go.Figure,
    part: pd.DataFrame,
    panel: int,
    columns: tuple[str, str | None, str | None],
    scale: float,
    style: dict[str, object],
    what: str,
) -> bool:
    """One level's points of one column (with its interval columns, when given); ``what``
    is the hover line of the value. False when the level has no such number: no trace."""
    value, low, high = columns
    y = part[value].to_numpy(float) * scale
    if not np.isfinite(y).any():
        return False
    error = None
    if low is not None and high is not None:
        error = _errors(y, part[low].to_numpy(float) * scale, part[high].to_numpy(float) * scale)
    custom, template = _hover(part, what)
    row, col = (panel - 1) // 2 + 1, (panel - 1) % 2 + 1
    fig.add_trace(
        go.Scatter(
            x=part["input_tokens"].to_numpy(float),
            y=y,
            mode="lines+markers",
            error_y=error,
            customdata=custom,
            hovertemplate=template,
            **style,
        ),
        row=row,
        col=col,
    )
    return True


def _log_y(fig: go.Figure, values: np.ndarray, unit: str, panel: int) -> None:
    finite = values[np.isfinite(values) & (values > 0)]
    row, col = (panel - 1) // 2 + 1, (panel - 1) % 2 + 1
    fig.update_yaxes(type="log", row=row, col=col)
    if finite.size:
        ticks = log_ticks(float(finite.min()), float(finite.max()), unit)
        fig.update_yaxes(
            tickmode="array", tickvals=ticks.values, ticktext=ticks.labels, row=row, col=col
        )


def _planned(
    fig: go.Figure, part: pd.DataFrame, plan: SweepPlan, name: str, column: str, hue: str
) -> None:
    """The planner's KV (and linear state) for level ``name`` ("c=N") in panel (d),
    dotted, in the panel's unit."""
    if not name.startswith("c="):
        return  # a request rate is no count of sequences
    streams = float(name[2:])
    lengths, values, states = [], [], []
    for length in part["input_tokens"]:
        point = plan.point(int(length))
        if point is None:
            continue
        blocks = point.blocks_per_sequence
        if column == "kv_bytes_used_max":  # block-granular when the block size is known
            kv = point.kv_bytes_per_sequence
            if blocks is not None and plan.block_tokens:
                kv = blocks * plan.block_tokens * plan.kv_bytes_per_token
            value = streams * kv / MIB
            states.append(streams * plan.state_bytes_per_sequence / MIB)
        elif blocks is None:
            continue
        elif column == "kv_usage_max_ratio":
            if not plan.cache_blocks:
                continue
            value = 100.0 * streams * blocks / plan.cache_blocks
        else:
            value = streams * blocks
        lengths.append(float(length))
        values.append(value)
    units = {"kv_usage_max_ratio": "% of blocks", "kv_bytes_used_max": "MiB"}
    unit = units.get(column, "blocks")
    _planned_trace(fig, lengths, values, f"{name} planner", name, hue, unit)
    if any(states):
        _planned_trace(fig, lengths, states, f"{name} planner, state", name, hue, unit)


def _planned_trace(
    fig: go.Figure,
    lengths: list[float],
    values: list[float],
    label: str,
    group: str,
    hue: str,
    unit: str,
) -> None:
    if not values:
        return
    fig.add_trace(
        go.Scatter(
            x=lengths,
            y=values,
            mode="lines+markers",
            name=plotly_text(label),
            legendgroup=plotly_text(group),
            line={"color": "#212121", "dash": "dot", "width": 2},
            marker={
                "color": hue,
                "size": 11,
                "symbol": "x-thin",
                "line": {"width": 2, "color": "#212121"},
            },
            hovertemplate=f"planner (estimate): %{{y:,.1f}} {unit}<br>%{{x:,}} prompt tokens",
        ),
        row=2,
        col=2,
    )


def sweep_chart(
    frame: pd.DataFrame,
    not_available: Sequence[SweepPointSummary],
    title: str = TITLE,
    plan: SweepPlan | None = None,
) -> go.Figure:
    """``sweep_frame`` output in four panels, the lengths ``not_available`` marked; with
    ``plan``, the planner's blocks beside the measured ones in panel (d)."""
    if frame.empty:
        return empty(title, "no scenario of the sweep has a summary")
    fig = make_subplots(
        rows=2, cols=2, subplot_titles=PANELS, horizontal_spacing=0.12, vertical_spacing=0.16
    )
    kv = kv_panel(frame)
    has_tpot = frame["tpot_p50_s"].notna().any()
    has_state = bool((frame["state_bytes_used_max"].fillna(0) > 0).any())
    for index, (name, part) in enumerate(_levels(frame)):
        hue = color(index)
        label = plotly_text(name)
        symbols = ["circle" if s == "ok" else "circle-open" for s in part["status"]]
        solid = {
            "name": label,
            "legendgroup": label,
            "showlegend": False,
            "line": {"color": hue},
            "marker": {"color": hue, "size": 8, "symbol": symbols},
        }
        dashed = {**solid, "line": {"color": hue, "dash": "dash"}, "opacity": 0.6}
        dashed["marker"] = {"color": hue, "size": 5, "symbol": symbols}
        series = [
            (1, ("ttft_p50_s", "ttft_p50_low_s", "ttft_p50_high_s"), 1e3, solid,
             "TTFT p50 %{y:,.1f} ms"),
            (1, ("ttft_p99_s", None, None), 1e3, dashed, "TTFT p99 %{y:,.1f} ms"),
            (2, ("prefill_tok_s", "prefill_low_tok_s", "prefill_high_tok_s"), 1.0, solid,
             "%{y:,.0f} prompt tok/s per request (p50)"),
            (2, ("total_prompt_tok_s", None, None), 1.0, dashed,
             "%{y:,.0f} prompt tok/s in total"),
            (3, ("tpot_p50_s", "tpot_p50_low_s", "tpot_p50_high_s"), 1e3, solid,
             "TPOT p50 %{y:,.2f} ms"),
        ]  # fmt: skip
        if kv is not None:
            column, scale, axis = kv
            series.append((4, (column, None, None), scale, solid, f"{axis} %{{y:,.3f}}"))
            if column == "kv_bytes_used_max" and has_state:
                series.append((4, ("state_bytes_used_max", None, None), scale, dashed,
                               "linear state in use %{y:,.3f} MiB"))  # fmt: skip
        # The level's first trace drawn carries its legend entry (a level without a TTFT
        # still gets one).
        listed = False
        for panel, columns, factor, style, what in series:
            style = {**style, "showlegend": not listed}
            listed |= _series(fig, part, panel, columns, factor, style, what)
        if plan is not None and kv is not None:  # over the measured line, which it may equal
            _planned(fig, part, plan, name, kv[0], hue)
    if not has_tpot:
        _note(fig, 3, NO_TPOT)
        # An empty panel's default 0-4 scale would read as numbers.
        fig.update_yaxes(showticklabels=False, row=2, col=1)
    if kv is None:
        _note(fig, 4, NO_KV)
        fig.update_yaxes(showticklabels=False, row=2, col=2)
    _not_sent(fig, not_available)
    lengths = [float(n) for n in frame["input_tokens"]] + [
        float(p.input_tokens) for p in not_available
    ]
    x_range = [
        math.log10(min(lengths)) - X_PAD_DECADES,
        math.log10(max(lengths)) + X_PAD_DECADES,
    ]
    # Ticks over the shown range: 1,024 to 4,096 alone would get only 2,000 and 3,000.
    ticks = log_ticks(10 ** x_range[0], 10 ** x_range[1], "")
    fig.update_xaxes(
        type="log",
        range=x_range,
        tickmode="array",
        tickvals=ticks.values,
        ticktext=ticks.labels,
        title_text="prompt tokens (log scale)",
    )
    ttft_ms = frame[["ttft_p50_s", "ttft_p50_low_s", "ttft_p50_high_s", "ttft_p99_s"]]
    _log_y(fig, ttft_ms.to_numpy(float).ravel() * 1e3, "ms", 1)
    fig.update_yaxes(title_text="TTFT (ms, log scale)", row=1, col=1)
    fig.update_yaxes(title_text="prompt tokens/s", rangemode="tozero", row=1, col=2)
    fig.update_yaxes(title_text="TPOT (ms)", rangemode="tozero", row=2, col=1)
    fig.update_yaxes(
        title_text=kv[2] if kv is not None else "KV cache",
        rangemode="tozero",
        row=2,
        col=2,
    )
    if kv is not None and has_state:  # a flat state beside a growing KV: both on a log axis
        held = frame[["kv_bytes_used_max", "state_bytes_used_max"]].to_numpy(float).ravel()
        _log_y(fig, held / MIB, "MiB", 4)
        fig.update_yaxes(title_text="KV (solid) and linear state (dashed), MiB, log", row=2, col=2)
    fig.update_layout(legend={"title": {"text": "load level"}})
    return styled(fig, title, height=760)
