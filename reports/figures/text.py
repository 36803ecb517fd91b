"""Text and layout shared by the figures.

Plotly draws titles, axis and legend labels, hover text and table cells through its own
HTML-like parser (``<b>``, ``<br>``, ``<a href>`` ...), so a scenario named
``<img src=x onerror=...>`` would otherwise be markup. ``plotly_text`` escapes ``&``, ``<``
and ``>``; Plotly decodes exactly these entities back, so the reader sees the original
characters as text. Quotes are left alone: without ``<`` no tag (or attribute) can form,
and Plotly does not decode ``&quot;``.
"""

from __future__ import annotations

import html

import plotly.graph_objects as go

# Categorical palette (Plotly's default qualitative colors, fixed so charts agree).
COLORS = (
    "#636efa",
    "#ef553b",
    "#00cc96",
    "#ab63fa",
    "#ffa15a",
    "#19d3f3",
    "#ff6692",
    "#b6e880",
    "#ff97ff",
    "#fecb52",
)


def plotly_text(value: object) -> str:
    """``value`` as text Plotly shows literally (``&``, ``<``, ``>`` escaped)."""
    return html.escape(str(value), quote=False)


def color(index: int) -> str:
    return COLORS[index % len(COLORS)]


def styled(fig: go.Figure, title: str, *, height: int = 420) -> go.Figure:
    """The common look: white template, a title (escaped here), legend on the right."""
    fig.update_layout(
        template="plotly_white",
        title={"text": plotly_text(title), "x": 0.0, "xanchor": "left"},
        height=height,
        margin={"l": 70, "r": 30, "t": 60, "b": 55},
        hovermode="closest",
    )
    return fig


def empty(title: str, message: str) -> go.Figure:
    """A figure that says why there is nothing to draw, rather than an empty frame."""
    fig = go.Figure()
    fig.add_annotation(
        text=plotly_text(message), showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper"
    )
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return styled(fig, title, height=200)
