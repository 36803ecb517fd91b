"""The interactivity chart: per-user output tokens/s against total output tokens/s.

One point per load level (a scenario of the run's summary,
``collectors.serving_records.ScenarioSummary``), the chart an operating point is picked from:

- x, total output tokens/s: the level's ``output_throughput_tok_s``, its headline output
  tokens/s (output tokens of its ok measured requests / its measured window).
- y, per-user output tokens/s: 1 / TPOT p50 (TPOT: ``collectors.latency``; p50:
  ``collectors.quantiles``), how fast the median request sees its tokens arrive. The error
  bar is the p50's 95% interval inverted: 1 / upper bound .. 1 / lower bound (no bar where
  the interval is unknown).
- A second series, dashed and lighter: 1 / TPOT p99, the per-user speed of the slowest 1%
  of requests. It has no front.

A level is on the Pareto front of its line when no other ok level of that line has at least
its total and at least its per-user tokens/s (p50), and strictly more of one (maximize
both); front points are ringed and joined by a line. A level whose status is not "ok"
(failed or invalid) is drawn as a hollow grey point and is never on the front, nor does it
push another level off it. One line per prompt length (``input_tokens``) for a sweep over
prompt lengths, else a single line. A level without a throughput or a TPOT p50 (or a TPOT
of 0) has no point.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from moeperf.collectors.serving_records import ScenarioSummary
from moeperf.reports.figures.concurrency import pareto_front
from moeperf.reports.figures.text import color, empty, plotly_text, styled

TITLE = "Interactivity: per-user against total output tokens/s"
COLUMNS = [
    "scenario",
    "level",
    "input_tokens",
    "total_tok_s",
    "user_tok_s_p50",
    "user_tok_s_low",
    "user_tok_s_high",
    "user_tok_s_p99",
    "status",
    "on_front",
]
# Levels that did not pass: their numbers cover only the requests that finished.
NOT_OK_COLOR = "#9e9e9e"


def _per_second(seconds: float | None) -> float:
    """1 / ``seconds``; NaN when unknown or not positive (a TPOT of 0 is no speed)."""
    return 1.0 / seconds if seconds is not None and seconds > 0 else float("nan")


def _row(scenario: str, entry: ScenarioSummary) -> dict[str, object]:
    tpot_s = entry.latency_s.tpot_s
    p50 = tpot_s.at(0.5)
    throughput = entry.output_throughput_tok_s
    return {
        "scenario": scenario,
        "level": float("nan") if entry.level is None else float(entry.level),
        "input_tokens": entry.input_tokens,
        "total_tok_s": float("nan") if throughput is None else float(throughput),
        "user_tok_s_p50": _per_second(None if p50 is None else p50.value),
        # Inverting swaps the bounds: the slowest TPOT is the lowest speed.
        "user_tok_s_low": _per_second(None if p50 is None else p50.ci_high),
        "user_tok_s_high": _per_second(None if p50 is None else p50.ci_low),
        "user_tok_s_p99": _per_second(tpot_s.value_at(0.99)),
        "status": entry.status,
    }


def has_numbers(frame: pd.DataFrame) -> pd.Series:
    """Mask of the rows of ``interactivity_frame`` output that get a point."""
    numbers = frame[["total_tok_s", "user_tok_s_p50"]].astype(float)
    # NaN < inf is False: both a missing and an infinite value get no point.
    return (numbers.abs() < np.inf).all(axis=1)


def interactivity_frame(scenarios: Mapping[str, ScenarioSummary]) -> pd.DataFrame:
    """One row per load level, in run order (columns ``COLUMNS``; NaN where unknown,
    ``input_tokens`` <NA> for a plain sweep). ``on_front``: on its line's Pareto front."""
    frame = pd.DataFrame([_row(s, e) for s, e in scenarios.items()], columns=COLUMNS[:-1])
    frame["input_tokens"] = frame["input_tokens"].astype("Int64")
    frame["on_front"] = False
    candidates = frame[(frame["status"] == "ok") & has_numbers(frame)]
    for _, line in candidates.groupby("input_tokens", dropna=False):
        total = line["total_tok_s"].to_numpy(float)
        # pareto_front maximizes its first axis and minimizes its second: negate the speed.
        front = pareto_front(total, -line["user_tok_s_p50"].to_numpy(float))
        frame.loc[line.index[front], "on_front"] = True
    return frame


def _line_name(input_tokens: object) -> str:
    """A line's legend name from its ``input_tokens`` group key (<NA>: a plain sweep)."""
    if isinstance(input_tokens, int | np.integer):
        return f"prompt {int(input_tokens)} tok"
    return "all levels"


def _hover(points: pd.DataFrame) -> tuple[np.ndarray, str]:
    """customdata and hovertemplate: scenario, level, total and per-user tokens/s."""
    level = ["-" if pd.isna(v) else f"{v:g}" for v in points["level"]]
    # An object array, so the speeds stay numbers for the hover's number format.
    custom = np.array(
        list(
            zip(
                [plotly_text(s) for s in points["scenario"]],
                level,
                points["user_tok_s_p50"].astype(float),
                points["user_tok_s_p99"].astype(float),
                [plotly_text(s) for s in points["status"]],
                strict=True,
            )
        ),
        dtype=object,
    )
    template = (
        "%{customdata[0]} (level %{customdata[1]}, %{customdata[4]})"
        "<br>%{x:.1f} tok/s total"
        "<br>%{customdata[2]:.2f} tok/s/user (1 / TPOT p50)"
        "<br>%{customdata[3]:.2f} tok/s/user (1 / TPOT p99)"
    )
    return custom, template


def _line_traces(line: pd.DataFrame, name: str, hue: str) -> list[go.Scatter]:
    """The p50 points with their intervals, the p99 series, and the ringed front."""
    ok = line.sort_values("total_tok_s")
    custom, template = _hover(ok)
    x = ok["total_tok_s"].to_numpy(float)
    y = ok["user_tok_s_p50"].to_numpy(float)
    front = ok[ok["on_front"].astype(bool)]
    return [
        go.Scatter(
            x=x,
            y=y,
            mode="markers",
            name=f"{name}: 1 / TPOT p50",
            legendgroup=name,
            marker={"color": hue, "size": 8},
            error_y={
                "type": "data",
                "array": ok["user_tok_s_high"].to_numpy(float) - y,
                "arrayminus": y - ok["user_tok_s_low"].to_numpy(float),
                "color": hue,
                "thickness": 1,
            },
            customdata=custom,
            hovertemplate=template + f"<extra>{plotly_text(name)}</extra>",
        ),
        go.Scatter(
            x=x,
            y=ok["user_tok_s_p99"].to_numpy(float),
            mode="lines+markers",
            name=f"{name}: 1 / TPOT p99",
            legendgroup=name,
            opacity=0.5,
            line={"color": hue, "dash": "dash"},
            marker={"size": 5},
            customdata=custom,
            hovertemplate=template + f"<extra>{plotly_text(name)}</extra>",
        ),
        go.Scatter(
            x=front["total_tok_s"].to_numpy(float),
            y=front["user_tok_s_p50"].to_numpy(float),
            mode="lines+markers",
            name=f"{name}: Pareto front",
            legendgroup=name,
            line={"color": hue},
            marker={"size": 16, "symbol": "circle-open", "color": hue},
            hoverinfo="skip",
        ),
    ]


def interactivity_chart(frame: pd.DataFrame, title: str = TITLE) -> go.Figure:
    """``interactivity_frame`` output as a scatter: one colour per prompt length."""
    points = frame[has_numbers(frame)]
    if points.empty:
        return empty(title, "no load level has both an output throughput and a TPOT p50")
    fig = go.Figure()
    ok = points["status"] == "ok"
    for index, (tokens, line) in enumerate(points[ok].groupby("input_tokens", dropna=False)):
        for trace in _line_traces(line, plotly_text(_line_name(tokens)), color(index)):
            fig.add_trace(trace)
    failed = points[~ok]
    if not failed.empty:
        custom, template = _hover(failed)
        fig.add_trace(
            go.Scatter(
                x=failed["total_tok_s"].to_numpy(float),
                y=failed["user_tok_s_p50"].to_numpy(float),
                mode="markers",
                name="level not ok (failed or invalid)",
                marker={"size": 9, "symbol": "circle-open", "color": NOT_OK_COLOR},
                customdata=custom,
                hovertemplate=template + "<extra>not ok</extra>",
            )
        )
    fig.update_xaxes(title_text="total output tokens/s", rangemode="tozero")
    fig.update_yaxes(title_text="per-user output tokens/s", rangemode="tozero")
    return styled(fig, title, height=460)
