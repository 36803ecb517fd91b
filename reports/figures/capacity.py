"""A capacity search's probes: each criterion against the load level, the limit, and the
interval where the capacity lies.

One panel per criterion of the search (TTFT p99, TPOT p99 in ms, goodput ratio). A point
is one probe (one load level of the run): its p99 (numpy linear) with its 95%
distribution-free interval as error bars, or its goodput ratio (ok requests meeting
[slo] / measured requests); green where every criterion held, red where one failed, grey
where the probe could not be judged; hovering shows the probe's number in the search and
its verdict. The dashed line is the criterion's limit; the shaded band spans the highest
level that held to the lowest that failed: the capacity lies in it.
"""

from __future__ import annotations

from collections.abc import Mapping

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from moeperf.collectors.capacity_records import CapacitySummary
from moeperf.collectors.quantiles import Described
from moeperf.collectors.serving_records import ScenarioSummary
from moeperf.reports.figures.text import empty, plotly_text, styled

_COLOR = {True: "#2ca02c", False: "#d62728", None: "#7f7f7f"}
_VERDICT = {True: "held", False: "failed", None: "not judged"}


def _p99_ms(described: Described) -> tuple[float | None, float | None, float | None]:
    estimate = described.at(0.99)
    if estimate is None:
        return None, None, None
    low = None if estimate.ci_low is None else estimate.ci_low * 1e3
    high = None if estimate.ci_high is None else estimate.ci_high * 1e3
    return estimate.value * 1e3, low, high


def capacity_probes(
    capacity: CapacitySummary, scenarios: Mapping[str, ScenarioSummary]
) -> go.Figure:
    title = f"Capacity search: {capacity.criteria}"
    panels: list[tuple[str, float | None]] = []
    if capacity.ttft_p99_limit_s is not None:
        panels.append(("TTFT p99 (ms)", capacity.ttft_p99_limit_s * 1e3))
    if capacity.tpot_p99_limit_s is not None:
        panels.append(("TPOT p99 (ms)", capacity.tpot_p99_limit_s * 1e3))
    if capacity.min_goodput_ratio is not None:
        panels.append(("goodput ratio", capacity.min_goodput_ratio))
    probes = [p for p in capacity.probes if p.scenario in scenarios]
    if not panels or not probes:
        return empty(title, "no probe with a summary to draw")
    unit = capacity.unit
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=[name for name, _ in panels])
    for col, (name, limit) in enumerate(panels, start=1):
        for number, probe in enumerate(capacity.probes, start=1):
            entry = scenarios.get(probe.scenario)
            if entry is None:
                continue
            if name.startswith("goodput"):
                value, low, high = entry.goodput_ratio, None, None
            else:
                latency = entry.latency_s
                value, low, high = _p99_ms(
                    latency.ttft_s if name.startswith("TTFT") else latency.tpot_s
                )
            if value is None:
                continue
            error = None
            if low is not None and high is not None:
                error = {"type": "data", "array": [high - value], "arrayminus": [value - low]}
            fig.add_trace(
                go.Scatter(
                    x=[probe.level],
                    y=[value],
                    error_y=error,
                    mode="markers+text",
                    text=[str(number)],
                    textposition="top center",
                    marker={"color": _COLOR[probe.passed], "size": 10},
                    name=_VERDICT[probe.passed],
                    legendgroup=_VERDICT[probe.passed],
                    showlegend=False,
                    hovertext=plotly_text(
                        f"probe {number} at {probe.level:g} {unit}: {_VERDICT[probe.passed]}; "
                        f"{probe.reason}"
                    ),
                    hoverinfo="text",
                ),
                row=1,
                col=col,
            )
        if limit is not None:
            fig.add_hline(y=limit, line_dash="dash", line_color="#555", row=1, col=col)
        if capacity.passed_level is not None and capacity.failed_level is not None:
            fig.add_vrect(
                x0=capacity.passed_level,
                x1=capacity.failed_level,
                fillcolor="#1f77b4",
                opacity=0.12,
                line_width=0,
                row=1,
                col=col,
            )
        fig.update_xaxes(title_text=unit, row=1, col=col)
    return styled(fig, title)
