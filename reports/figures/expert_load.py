"""Expert load: tokens routed to each expert of each MoE layer, summed over steps.

A cell shows its expert's tokens divided by the mean of its layer (1.0 = perfectly
balanced), so layers with different traffic share one colour scale; the hover gives the
tokens. The title names the worst layer's max / mean, the imbalance the training
metrics export per step.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from moeperf.reports.figures.text import empty, styled


def expert_load_matrix(tokens_per_expert: pd.Series) -> np.ndarray:
    """Sum of the ``[layer][expert]`` token counts of every record (ragged ones padded)."""
    matrices = [
        np.array([np.asarray(layer, dtype=float) for layer in value])
        for value in tokens_per_expert
        if value is not None and len(value) and all(len(layer) for layer in value)
    ]
    if not matrices:
        return np.zeros((0, 0))
    layers = max(m.shape[0] for m in matrices)
    experts = max(m.shape[1] if m.ndim == 2 else 0 for m in matrices)
    total = np.zeros((layers, experts))
    for m in matrices:
        if m.ndim != 2:
            continue
        total[: m.shape[0], : m.shape[1]] += m
    return total


def expert_load_heatmap(matrix: np.ndarray, title: str = "Expert load") -> go.Figure:
    """Heatmap of ``matrix`` (layers x experts) relative to each layer's mean."""
    if matrix.size == 0 or not matrix.any():
        return empty(title, "no tokens per expert recorded")
    means = matrix.mean(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        relative = np.where(means > 0, matrix / means, np.nan)
    worst = np.nanmax(relative, axis=1)
    layer = int(np.nanargmax(worst))
    fig = go.Figure(
        go.Heatmap(
            z=relative,
            customdata=matrix,
            x=np.arange(matrix.shape[1]),
            y=np.arange(matrix.shape[0]),
            colorscale="RdBu_r",
            zmid=1.0,
            colorbar={"title": {"text": "load / layer mean"}},
            hovertemplate="layer %{y}, expert %{x}<br>%{customdata:,.0f} tokens"
            "<br>%{z:.2f} x layer mean<extra></extra>",
        )
    )
    fig.update_xaxes(title_text="expert")
    fig.update_yaxes(title_text="layer", autorange="reversed")
    height = min(900, 160 + 22 * matrix.shape[0])
    return styled(
        fig, f"{title} (worst: layer {layer}, max / mean {worst[layer]:.2f})", height=height
    )


def policy_matrices(steps: pd.DataFrame, names: pd.Series) -> dict[str, np.ndarray]:
    """The summed matrix of each policy (``names`` aligned with ``steps``), in order."""
    return {
        str(policy): expert_load_matrix(steps.loc[names == policy, "tokens_per_expert"])
        for policy in dict.fromkeys(names)
    }
