"""Simulator against measurement: each training scenario's median step time and highest
step peak as the cluster simulator (configured as the reference trainer) predicted them,
against what the trainer measured (for interleaved scenarios, the step at the fitted
scenario's pace: PredictedScenario.measured_step_s). One point per scenario on each
panel; the diagonal is a perfect prediction and the band around it the tolerance the
simulator is held to (step time within 10%, peak memory within 5%). A hollow point is
the scenario the simulator's efficiency was fitted on: not a prediction. Predicted
figures are simulated."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from moeperf.collectors.training_summary import SimulatorCheck
from moeperf.reports.figures.text import plotly_text, styled

MIB = 2**20


def simulator_frame(check: SimulatorCheck) -> pd.DataFrame:
    """One row per predicted scenario: predicted and measured, and the errors."""
    rows = [
        {
            "scenario": name,
            "step s predicted": p.predicted_step_s_p50,
            "step s measured": p.measured_step_s,  # paired where the scenarios interleaved
            "step error": p.step_error,
            "step error 95% CI": _interval(p.step_error_ci),
            "peak MiB predicted": _mib(p.predicted_peak_bytes),
            "peak MiB measured": _mib(p.measured_peak_bytes),
            "peak error": p.peak_error,
            "OOMs predicted": p.predicted_ooms,
            "OOMs measured": p.measured_ooms,
            "fitted": p.fitted,
        }
        for name, p in check.scenarios.items()
    ]
    return pd.DataFrame(rows)


def _interval(interval: tuple[float, float] | None) -> str | None:
    return None if interval is None else f"{interval[0]:+.1%} to {interval[1]:+.1%}"


def _mib(value: int | None) -> float | None:
    return None if value is None else value / MIB


def simulator_chart(
    check: SimulatorCheck, title: str = "Simulator against measurement"
) -> go.Figure:
    frame = simulator_frame(check)
    fig = make_subplots(
        rows=1, cols=2, subplot_titles=("median step time (s)", "peak memory (MiB)")
    )
    panels = (("step s", check.step_tolerance), ("peak MiB", check.peak_tolerance))
    for col, (what, tolerance) in enumerate(panels, start=1):
        part = frame.dropna(subset=[f"{what} predicted", f"{what} measured"])
        if part.empty:
            continue
        measured = part[f"{what} measured"].to_numpy(float)
        low, high = measured.min() * 0.9, measured.max() * 1.1
        for scale, dash in ((1.0, "solid"), (1 - tolerance, "dot"), (1 + tolerance, "dot")):
            line = go.Scatter(x=[low, high], y=[low * scale, high * scale], mode="lines",
                              line={"color": "#888", "dash": dash, "width": 1},
                              hoverinfo="skip", showlegend=False)  # fmt: skip
            fig.add_trace(line, row=1, col=col)
        fig.add_trace(
            go.Scatter(
                x=measured,
                y=part[f"{what} predicted"].to_numpy(float),
                mode="markers",
                text=[plotly_text(s) for s in part["scenario"]],
                hovertemplate="%{text}<br>measured %{x:.3g}<br>predicted %{y:.3g}<extra></extra>",
                marker={
                    "size": 9,
                    "symbol": ["circle-open" if f else "circle" for f in part["fitted"]],
                },
                showlegend=False,
            ),
            row=1,
            col=col,
        )
        fig.update_xaxes(title_text="measured", row=1, col=col)
        fig.update_yaxes(title_text="predicted (simulated)", row=1, col=col)
    return styled(fig, title)
