"""Failed and cancelled requests: how many of each type, per scenario.

Errors are data (``error_type`` as the client classified it, ``http_status``, and the
first ``error_message`` seen of each kind); cancelled requests count as their own type.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from moeperf.reports.figures.text import color, empty, plotly_text, styled

COLUMNS = ("scenario", "status", "error_type", "requests", "http_status", "example_message")


def error_counts(requests: pd.DataFrame) -> pd.DataFrame:
    """One row per (scenario, status, error type) of the requests not ok, all phases,
    scenarios in run order."""
    failed = requests[requests["status"] != "ok"]
    if failed.empty:
        return pd.DataFrame(columns=COLUMNS)
    kind = failed["error_type"].fillna(failed["status"]).astype(str)
    grouped = failed.assign(error_type=kind).groupby(
        ["scenario", "status", "error_type"], sort=False, dropna=False
    )
    table = grouped.agg(
        requests=("request_id", "size"),
        http_status=("http_status", lambda s: ", ".join(str(int(v)) for v in s.dropna().unique())),
        example_message=("error_message", lambda s: next(iter(s.dropna()), "")),
    ).reset_index()
    return table[list(COLUMNS)]


def error_bars(counts: pd.DataFrame, title: str = "Failed and cancelled requests") -> go.Figure:
    """Stacked bars: per scenario, the requests of each error type."""
    if counts.empty:
        return empty(title, "every request was ok")
    scenarios = [plotly_text(s) for s in dict.fromkeys(counts["scenario"])]
    fig = go.Figure()
    for index, (kind, part) in enumerate(counts.groupby("error_type", sort=False)):
        per_scenario = part.groupby("scenario", sort=False)["requests"].sum()
        fig.add_trace(
            go.Bar(
                x=[plotly_text(s) for s in per_scenario.index],
                y=per_scenario.to_numpy(),
                name=plotly_text(kind),
                marker={"color": color(index)},
            )
        )
    fig.update_layout(barmode="stack")
    fig.update_xaxes(type="category", categoryorder="array", categoryarray=scenarios)
    fig.update_yaxes(title_text="requests")
    return styled(fig, title, height=360)
