"""A fault drill over time: the level's requests by outcome, with each fault's window.

Requests are counted in bins of 0.25 s (wider for long levels, at most ``MAX_BINS``) by
the time they ended (done time), stacked: ok, then each error type. Each fault is a
shaded band from its injection to its own end (the restarted target's READY, the
SIGCONT, the window's end, the hook's healthy answer), and a dotted line marks its
recovery: the end of the first successful request sent at or after the injection. Time
runs from the level's start.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from moeperf.collectors.drill_records import DrillSummary
from moeperf.reports.figures.text import plotly_text, styled

MAX_BINS = 400
_BIN_S = 0.25
NS_PER_S = 1e9


def drill_chart(drill: DrillSummary, requests: pd.DataFrame) -> go.Figure:
    level = requests[requests["scenario"] == drill.scenario]
    done_s = (level["done_ns"].to_numpy(np.int64) - drill.level_start_ns) / NS_PER_S
    outcome = np.where(
        level["status"].to_numpy() == "ok",
        "ok",
        level["error_type"].fillna(level["status"]).to_numpy().astype(str),
    )
    end_s = float(done_s.max()) if len(done_s) else 1.0
    width = max(_BIN_S, math.ceil(end_s / MAX_BINS / _BIN_S) * _BIN_S)
    bins = np.floor(np.maximum(done_s, 0) / width).astype(np.int64)
    count = int(bins.max()) + 1 if len(bins) else 1
    figure = go.Figure()
    for name in ["ok", *sorted(set(outcome) - {"ok"})]:
        per_bin = np.bincount(bins[outcome == name], minlength=count)
        figure.add_trace(
            go.Bar(
                x=np.arange(count) * width,
                y=per_bin,
                width=width,
                offset=0,
                name=plotly_text(name),
                hovertemplate="%{y} requests ended in [%{x:.2f} s, +" + f"{width:g} s)",
            )
        )
    for fault in drill.faults:
        figure.add_vrect(
            x0=fault.at_s,
            x1=fault.at_s + max(fault.fault_s, width / 4),
            fillcolor="#b3261e",
            opacity=0.15,
            line_width=0,
            annotation_text=plotly_text(fault.kind),
            annotation_position="top left",
        )
        if fault.recovery_s is not None:
            figure.add_vline(x=fault.at_s + fault.recovery_s, line_dash="dot", line_color="#b3261e")
    figure.update_layout(
        barmode="stack",
        xaxis_title="seconds from the level's start (request done time)",
        yaxis_title=f"requests ended per {width:g} s",
    )
    return styled(figure, f"Fault drill ({drill.scenario}): requests by outcome over time")
