"""Micro-benchmark samples: the distribution of each metric, one panel per metric.

From the run's samples table (``metric``, ``value``, ``unit``, ``direction``,
``scenario``): a box per scenario with its samples drawn beside it (only the outliers
above 2,000 samples); the panel title says
the unit and which direction is better.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from moeperf.collectors.micro_summary import summarize_samples
from moeperf.reports.figures.text import color, empty, plotly_text, styled

MAX_POINTS = 2000


def _panel_title(metric: str, part: pd.DataFrame) -> str:
    units = ", ".join(dict.fromkeys(str(u) for u in part["unit"]))
    directions = ", ".join(dict.fromkeys(str(d) for d in part["direction"]))
    return f"{metric} ({units}; {directions} is better; n={len(part)})"


def micro_summary(samples: pd.DataFrame) -> pd.DataFrame:
    """Per metric and scenario: unit, better direction, samples, mean, and the median with
    its 95% interval (``collectors.micro_summary.summarize_samples``)."""
    rows = []
    for group in summarize_samples(samples):
        median = group.values.at(0.5)
        interval = "too few samples"
        if median and median.ci_low is not None and median.ci_high is not None:
            interval = f"[{median.ci_low:.4g}, {median.ci_high:.4g}]"
        rows.append(
            {
                "metric": group.metric,
                "scenario": group.scenario,
                "unit": ", ".join(group.units),
                "better": ", ".join(group.directions),
                "samples": group.values.count,
                "mean": group.values.mean,
                "median": median.value if median else None,
                "median 95% CI": interval,
            }
        )
    return pd.DataFrame(rows)


def micro_distributions(samples: pd.DataFrame, title: str = "Micro-benchmark samples") -> go.Figure:
    """Box plots with all points, a panel per metric."""
    if samples.empty:
        return empty(title, "no samples")
    metrics = list(dict.fromkeys(samples["metric"]))
    groups = {metric: samples[samples["metric"] == metric] for metric in metrics}
    fig = make_subplots(
        rows=len(metrics),
        cols=1,
        vertical_spacing=min(0.1, 0.35 / len(metrics)),
        subplot_titles=[plotly_text(_panel_title(m, groups[m])) for m in metrics],
    )
    for row, metric in enumerate(metrics, start=1):
        part = groups[metric]
        scenarios = part["scenario"].fillna("").astype(str)
        for index, (scenario, values) in enumerate(part.groupby(scenarios, sort=False)):
            fig.add_trace(
                go.Box(
                    y=values["value"].to_numpy(float),
                    name=plotly_text(scenario or metric),
                    # Every sample beside its box, while that stays legible (and small).
                    boxpoints="all" if len(values) <= MAX_POINTS else "outliers",
                    jitter=0.4,
                    pointpos=0,
                    marker={"size": 4, "color": color(index)},
                    showlegend=False,
                ),
                row=row,
                col=1,
            )
    return styled(fig, title, height=120 + 260 * len(metrics))
