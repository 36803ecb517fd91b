"""Prefill throughput against prompt length: prompt tokens / TTFT per ok request.

Prompt tokens are the server's usage count, else the client's. TTFT is the metric of
``collectors.latency`` (from the intended send, so queueing is inside it): the ratio is a
prefill throughput only where prefill dominates TTFT, which is why the chart is split by
scenario (load level). Requests are binned by prompt length on log-spaced edges shared
by all scenarios; each point is a bin's median, its bar the 10th to 90th percentile.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from moeperf.reports.figures.text import color, empty, plotly_text, styled

BINS = 12
COLUMNS = ("scenario", "prompt_low", "prompt_high", "requests", "p10", "p50", "p90")


def prompt_tokens(requests: pd.DataFrame) -> pd.Series:
    """Prompt tokens per request: server usage, else the client's count (float, NaN if none)."""
    server = pd.to_numeric(requests["prompt_tokens"], errors="coerce").astype(float)
    client = pd.to_numeric(requests["client_prompt_tokens"], errors="coerce").astype(float)
    return server.fillna(client)


def prefill_frame(
    scenario: pd.Series, prompt: pd.Series, ttft_s: pd.Series, bins: int = BINS
) -> pd.DataFrame:
    """Per scenario and prompt-length bin: request count and the p10 / p50 / p90 of
    prompt tokens / TTFT (tokens/s). Inputs are aligned per request; rows with a NaN or a
    TTFT <= 0 are left out."""
    prompt_v = prompt.to_numpy(float)
    ttft_v = ttft_s.to_numpy(float)
    keep = np.isfinite(prompt_v) & np.isfinite(ttft_v) & (ttft_v > 0) & (prompt_v > 0)
    if not keep.any():
        return pd.DataFrame(columns=COLUMNS)
    prompt_v, ttft_v = prompt_v[keep], ttft_v[keep]
    low, high = prompt_v.min(), prompt_v.max()
    if high > low:
        edges = np.geomspace(low, high * (1 + 1e-9), bins + 1)
    else:
        edges = np.array([low, low + 1.0])
    index = np.clip(np.searchsorted(edges, prompt_v, side="right") - 1, 0, len(edges) - 2)
    frame = pd.DataFrame(
        {
            "scenario": scenario.to_numpy()[keep],
            "bin": index,
            "rate": prompt_v / ttft_v,
        }
    )
    grouped = frame.groupby(["scenario", "bin"], sort=False)["rate"]
    stats = grouped.quantile(np.array([0.1, 0.5, 0.9])).unstack()
    stats.columns = ["p10", "p50", "p90"]
    stats["requests"] = grouped.size()
    stats = stats.reset_index()
    stats["prompt_low"] = edges[stats["bin"]]
    stats["prompt_high"] = edges[stats["bin"] + 1]
    order = {name: i for i, name in enumerate(pd.unique(frame["scenario"]))}
    stats["order"] = stats["scenario"].map(order)
    return stats.sort_values(["order", "bin"])[list(COLUMNS)].reset_index(drop=True)


def prefill_throughput(
    frame: pd.DataFrame, title: str = "Prefill throughput by prompt length"
) -> go.Figure:
    """One line per scenario: bin median with a 10th-90th percentile bar, x = bin middle
    (geometric) in prompt tokens, log scale."""
    if frame.empty:
        return empty(title, "no ok request with prompt tokens and a TTFT")
    fig = go.Figure()
    for index, (scenario, part) in enumerate(frame.groupby("scenario", sort=False)):
        middle = np.sqrt(part["prompt_low"].to_numpy(float) * part["prompt_high"].to_numpy(float))
        p50 = part["p50"].to_numpy(float)
        fig.add_trace(
            go.Scatter(
                x=middle,
                y=p50,
                mode="lines+markers",
                name=plotly_text(scenario),
                line={"color": color(index)},
                error_y={
                    "type": "data",
                    "symmetric": False,
                    "array": part["p90"].to_numpy(float) - p50,
                    "arrayminus": p50 - part["p10"].to_numpy(float),
                    "thickness": 1,
                },
                customdata=part["requests"].to_numpy(),
                hovertemplate="~%{x:.0f} prompt tokens<br>%{y:,.0f} tok/s (median)"
                "<br>n=%{customdata}<extra>%{fullData.name}</extra>",
            )
        )
    fig.update_xaxes(title_text="prompt tokens (bin middle, log scale)", type="log")
    fig.update_yaxes(title_text="prompt tokens / TTFT (tokens/s)")
    return styled(fig, title)
