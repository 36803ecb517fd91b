"""MTP A/B forest plot: one row per metric, the effect with its confidence interval.

Takes plain columns (the comparison itself is computed elsewhere): ``metric``,
``effect``, ``ci_low``, ``ci_high`` and, optionally, the arm labels ``baseline`` and
``candidate``. A vertical line marks no effect (``null_value``: 1 for ratios, 0 for
differences); a row whose interval excludes it is drawn solid, the others hollow.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from moeperf.reports.figures.text import empty, plotly_text, styled

REQUIRED = ("metric", "effect", "ci_low", "ci_high")


def excludes_null(frame: pd.DataFrame, null_value: float = 1.0) -> np.ndarray:
    """Rows whose interval lies wholly on one side of ``null_value``."""
    low = frame["ci_low"].to_numpy(float)
    high = frame["ci_high"].to_numpy(float)
    return (low > null_value) | (high < null_value)


def _row_label(row: pd.Series, arms_differ: bool) -> str:
    label = str(row["metric"])
    if arms_differ:
        label += f" ({row['candidate']} vs {row['baseline']})"
    return plotly_text(label)


def forest_plot(
    effects: pd.DataFrame,
    *,
    null_value: float = 1.0,
    effect_label: str = "candidate / baseline",
    title: str = "Effect sizes",
) -> go.Figure:
    """The forest plot of ``effects`` (see the module docstring for its columns)."""
    missing = [c for c in REQUIRED if c not in effects.columns]
    if missing:
        raise ValueError(f"forest_plot needs columns {', '.join(missing)}")
    if effects.empty:
        return empty(title, "no effects to show")
    has_arms = {"baseline", "candidate"} <= set(effects.columns)
    pairs = effects[["baseline", "candidate"]].drop_duplicates() if has_arms else None
    arms_differ = pairs is not None and len(pairs) > 1
    if pairs is not None and len(pairs) == 1:
        baseline, candidate = pairs.iloc[0]
        title = f"{title}: {candidate} vs {baseline}"
    labels = [_row_label(row, arms_differ) for _, row in effects.iterrows()]
    effect = effects["effect"].to_numpy(float)
    significant = excludes_null(effects, null_value)
    fig = go.Figure(
        go.Scatter(
            x=effect,
            y=labels,
            mode="markers",
            marker={
                "size": 11,
                "symbol": np.where(significant, "square", "square-open").tolist(),
                "color": "#2a3f8f",
            },
            error_x={
                "type": "data",
                "symmetric": False,
                "array": effects["ci_high"].to_numpy(float) - effect,
                "arrayminus": effect - effects["ci_low"].to_numpy(float),
                "thickness": 1.5,
            },
            customdata=np.stack(
                [effects["ci_low"].to_numpy(float), effects["ci_high"].to_numpy(float)], axis=1
            ),
            hovertemplate="%{y}<br>%{x:.4g} [%{customdata[0]:.4g}, %{customdata[1]:.4g}]"
            "<extra></extra>",
            showlegend=False,
        )
    )
    fig.add_vline(x=null_value, line={"color": "#888", "dash": "dash"})
    fig.update_xaxes(title_text=plotly_text(f"{effect_label} (95% CI)"))
    fig.update_yaxes(autorange="reversed", type="category")
    return styled(fig, title, height=140 + 34 * len(effects))
