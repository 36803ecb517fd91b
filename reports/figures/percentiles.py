"""The percentile table: p50 / p90 / p99 per scenario and metric, each with its sample
count and 95% confidence interval, exactly as ``collectors.quantiles.describe`` gives them
(the interval reads "too few samples" where describe has none)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from moeperf.collectors.quantiles import Described
from moeperf.collectors.units import ms_text
from moeperf.reports.figures.text import plotly_text, styled

QUANTILES = {0.5: "p50", 0.9: "p90", 0.99: "p99"}


def percentile_frame(latencies: Iterable[tuple[str, str, Described]]) -> pd.DataFrame:
    """One row per (scenario, metric label, description), e.g. from a serving summary's
    ``LatencySummary.labelled()``, values in seconds: scenario, metric, count, mean_s, and
    p50_s, p50_low_s, p50_high_s, ... (None where a quantile was not computed)."""
    rows = []
    for scenario, label, described in latencies:
        row: dict[str, Any] = {
            "scenario": scenario,
            "metric": label,
            "count": described.count,
            "mean_s": described.mean,
        }
        for q, name in QUANTILES.items():
            estimate = described.at(q)
            if estimate is not None:
                row[f"{name}_s"] = estimate.value
                row[f"{name}_low_s"] = estimate.ci_low
                row[f"{name}_high_s"] = estimate.ci_high
        rows.append(row)
    columns = ["scenario", "metric", "count", "mean_s"] + [
        f"{name}{part}_s" for name in QUANTILES.values() for part in ("", "_low", "_high")
    ]
    return pd.DataFrame(rows, columns=columns)


def _with_ci(row: pd.Series, name: str) -> str:
    value, low, high = row[f"{name}_s"], row[f"{name}_low_s"], row[f"{name}_high_s"]
    if value is None or not np.isfinite(value):
        return "-"
    if low is None or high is None or not (np.isfinite(low) and np.isfinite(high)):
        return f"{ms_text(value)} (too few samples)"
    return f"{ms_text(value)} [{ms_text(low)}, {ms_text(high)}]"


def percentile_table(frame: pd.DataFrame, title: str = "Latency percentiles") -> go.Figure:
    """A table figure of ``percentile_frame`` output, in milliseconds."""
    header = ["scenario", "metric", "samples"] + [
        f"{name} ms [95% CI]" for name in QUANTILES.values()
    ]
    cells = [
        [plotly_text(s) for s in frame["scenario"]],
        [plotly_text(m) for m in frame["metric"]],
        [f"{int(c):,}" for c in frame["count"]],
    ]
    for name in QUANTILES.values():
        cells.append([_with_ci(row, name) for _, row in frame.iterrows()])
    fig = go.Figure(
        go.Table(
            columnwidth=[1.2, 1.4, 1, 2, 2, 2],
            header={"values": header, "align": "left", "fill_color": "#eef1f8"},
            cells={"values": cells, "align": "left", "height": 24},
        )
    )
    fig = styled(fig, title, height=min(100 + 24 * max(len(frame), 1), 1600))
    fig.update_layout(margin={"l": 10, "r": 10, "t": 50, "b": 10})
    return fig
