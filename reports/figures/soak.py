"""A soak over time: one point per window for each watched series, and its fitted trend.

Panels, top to bottom: output tokens/s; TTFT p50, TTFT p99 and TPOT p50 (ms); the
target's resident memory (MiB); KV-cache usage (%) and preemptions per window where the
target reports them. Each
point is a window of the soak (``collectors.soak_records`` defines its value), drawn at
the window's middle, in seconds from the level's start. The dashed line of a series is
its least-squares line over those points (the fit behind the slope in the verdicts
table: it passes through the points' mean with the fitted slope); the legend gives the
slope per hour with its 95% interval.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from moeperf.collectors.soak_records import Slope, SoakSummary, SoakWindow
from moeperf.reports.figures.text import color, empty, styled

S_PER_HOUR = 3600.0
MIB = 2**20

Series = tuple[str, Callable[[SoakWindow], float | None], Slope, float, str]


def _panels(soak: SoakSummary) -> list[tuple[str, list[Series]]]:
    ms = 1e3
    panels: list[tuple[str, list[Series]]] = [
        ("output tok/s", [("output tok/s", lambda w: w.output_tok_s, soak.throughput, 1, "")]),
        (
            "latency (ms)",
            [
                ("TTFT p50", lambda w: w.ttft_p50_s, soak.ttft_p50, ms, "ms"),
                ("TTFT p99", lambda w: w.ttft_p99_s, soak.ttft_p99, ms, "ms"),
                ("TPOT p50", lambda w: w.tpot_p50_s, soak.tpot_p50, ms, "ms"),
            ],
        ),
        ("RSS (MiB)", [("RSS", lambda w: w.rss_bytes, soak.rss, 1 / MIB, "MiB")]),
    ]
    if soak.kv_usage.windows:
        panels.append(
            ("KV usage (%)", [("KV usage", lambda w: w.kv_usage_ratio, soak.kv_usage, 100, "pts")])
        )
    if soak.preemptions.windows:
        panels.append(
            (
                "preemptions per window",
                [("preemptions", lambda w: w.preemptions, soak.preemptions, 1, "")],
            )
        )
    return panels


def _label(name: str, slope: Slope, scale: float, unit: str) -> str:
    if slope.per_hour is None or slope.low_per_hour is None or slope.high_per_hour is None:
        return f"{name} (too few windows for a slope)"
    unit = f" {unit}" if unit else ""
    return (
        f"{name}: {slope.per_hour * scale:+.3g}{unit}/h "
        f"[{slope.low_per_hour * scale:+.3g}, {slope.high_per_hour * scale:+.3g}]"
    )


def soak_chart(soak: SoakSummary, title: str = "Soak: windows over time") -> go.Figure:
    if not soak.windows:
        return empty(title, "the soak has no whole window")
    panels = _panels(soak)
    fig = make_subplots(
        rows=len(panels),
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.06,
        subplot_titles=[p[0] for p in panels],
    )
    mids = np.array([(w.start_s + w.end_s) / 2 for w in soak.windows])
    trace = 0
    for row, (_, series) in enumerate(panels, start=1):
        for name, value, slope, scale, unit in series:
            y = np.array([np.nan if (v := value(w)) is None else v * scale for w in soak.windows])
            tint = color(trace)
            trace += 1
            fig.add_trace(
                go.Scatter(
                    x=mids,
                    y=y,
                    mode="lines+markers",
                    name=_label(name, slope, scale, unit),
                    line={"color": tint},
                    hovertemplate=f"t=%{{x:.0f}} s<br>%{{y:.4g}}<extra>{name}</extra>",
                ),
                row=row,
                col=1,
            )
            known = np.isfinite(y)
            if slope.per_hour is not None and known.sum() >= 2:
                x0, y0 = mids[known].mean(), y[known].mean()
                per_s = slope.per_hour * scale / S_PER_HOUR
                ends = np.array([mids[known][0], mids[known][-1]])
                fig.add_trace(
                    go.Scatter(
                        x=ends,
                        y=y0 + per_s * (ends - x0),
                        mode="lines",
                        line={"color": tint, "dash": "dash", "width": 1},
                        showlegend=False,
                        hoverinfo="skip",
                    ),
                    row=row,
                    col=1,
                )
    fig.update_xaxes(
        title_text=f"seconds from the level's start ({soak.window_s:g} s windows)",
        row=len(panels),
    )
    return styled(fig, title, height=220 * len(panels) + 120)
