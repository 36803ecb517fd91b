"""Cluster simulation (every figure simulated, none measured): three charts of a simulation
run's summary. OOM rate against scale: one line per policy and skew, devices on a log
axis. Policy comparison: effective tokens/s per device (restarts and checkpoint writes
included) per job, one bar per policy, spiky routing where it ran. Memory per stage: for
the largest job, each pipeline stage's highest rank's peak over the iterations, one line
per policy, beside the device's memory (dashed)."""

from __future__ import annotations

from collections import Counter

import pandas as pd
import plotly.graph_objects as go

from moeperf.collectors.simulation_summary import IDENTIFIED_SENSITIVITY, SimulationSummary
from moeperf.collectors.units import to_ms
from moeperf.reports.figures.text import plotly_text, styled

GB = 1e9


def scenario_frame(summary: SimulationSummary) -> pd.DataFrame:
    rows = [
        {
            "job": e.job, "policy": e.policy, "skew": e.skew, "devices": e.devices,
            "params B": e.parameters / 1e9, "layout": e.layout, "OOM rate": e.oom_rate,
            "step s p50": e.step_time_p50_s, "MFU": e.mfu_mean, "effective MFU": e.effective_mfu,
            "effective tok/s/device": e.effective_tokens_per_s_per_device, "bubble": e.bubble,
            "bubble (p-1)/(m+p-1)": e.bubble_formula,
            "peak GB": max(e.peak_memory_bytes_by_stage) / GB, "memory GB": e.memory_bytes / GB,
            "moved s": e.moved_s_mean, "plan ms p50": to_ms(e.decision_s_p50),
        }
        for e in summary.scenarios.values()
    ]  # fmt: skip
    return pd.DataFrame(rows)


def ablation_frame(summary: SimulationSummary) -> pd.DataFrame:
    return pd.DataFrame([
        {"job": r.job, "skew": r.skew, "step": r.step, "policy": r.policy, "over": r.baseline,
         "speedup (simulated)": r.speedup, "paper (seed 000, not ours)": r.paper}
        for r in summary.ablation
    ])  # fmt: skip


def reproduction_frame(summary: SimulationSummary) -> pd.DataFrame:
    return pd.DataFrame([
        {"run": r.name, "role": r.role, "devices": r.devices, "layout": r.layout,
         "policy": r.policy, "recipe": r.recipe, "metric": r.metric, "published": r.published,
         "simulated": r.simulated,
         "error": "no iteration completed" if r.error is None else f"{r.error:+.1%}",
         "source": r.source}
        for r in summary.reproductions
    ])  # fmt: skip


def not_taken_frame(summary: SimulationSummary) -> pd.DataFrame:
    return pd.DataFrame([
        {"run": n.name, "metric": n.metric, "published": n.published, "reason": n.reason,
         "source": n.source}
        for n in summary.not_taken
    ])  # fmt: skip


def oom_rate_chart(summary: SimulationSummary) -> go.Figure:
    frame = scenario_frame(summary)
    fig = go.Figure()
    for (policy, skew), part in frame.groupby(["policy", "skew"], sort=False):
        by_scale = part.groupby("devices", as_index=False)["OOM rate"].mean()
        name = plotly_text(f"{policy}, {skew}")
        fig.add_trace(go.Scatter(x=by_scale["devices"], y=by_scale["OOM rate"],
                                 mode="lines+markers", name=name))  # fmt: skip
    fig.update_xaxes(type="log", title_text="devices")
    fig.update_yaxes(title_text="OOM rate (simulated)", tickformat=".0%")
    return styled(fig, "OOM rate against scale (simulated)")


def policy_chart(summary: SimulationSummary) -> go.Figure:
    frame = scenario_frame(summary)
    skew = "spiky" if (frame["skew"] == "spiky").any() else str(frame["skew"].iloc[0])
    part = frame[frame["skew"] == skew]
    fig = go.Figure()
    for policy, rows in part.groupby("policy", sort=False):
        jobs = [plotly_text(j) for j in rows["job"]]
        bar = go.Bar(x=jobs, y=rows["effective tok/s/device"], name=plotly_text(str(policy)))
        fig.add_trace(bar)
    fig.update_layout(barmode="group")
    fig.update_yaxes(title_text="effective tokens/s per device (simulated)")
    return styled(fig, f"Policies compared, {skew} routing (simulated)")


def memory_chart(summary: SimulationSummary) -> go.Figure:
    entries = list(summary.scenarios.values())
    largest = max(entries, key=lambda e: (e.devices, e.parameters))
    own = [e for e in entries if e.job == largest.job]
    skew = "spiky" if any(e.skew == "spiky" for e in own) else own[0].skew
    fig = go.Figure()
    for e in (e for e in own if e.skew == skew):
        stages = list(range(len(e.peak_memory_bytes_by_stage)))
        fig.add_trace(go.Scatter(x=stages, y=[b / GB for b in e.peak_memory_bytes_by_stage],
                                 mode="lines+markers", name=plotly_text(e.policy)))  # fmt: skip
    stages = list(range(len(largest.peak_memory_bytes_by_stage)))
    memory = [largest.memory_bytes / GB] * len(stages)
    fig.add_trace(go.Scatter(x=stages, y=memory, mode="lines", name="device memory",
                             line={"dash": "dash", "color": "#888"}))  # fmt: skip
    fig.update_xaxes(title_text="pipeline stage")
    fig.update_yaxes(title_text="peak memory GB (simulated)")
    return styled(fig, plotly_text(f"Peak memory per stage, {largest.job}, {skew} (simulated)"))


def published_lines(summary: SimulationSummary) -> list[str]:
    """The calibration's constants, the validation rows' accuracy and the rows not taken,
    one line each."""
    lines = []
    if summary.calibration is not None:
        c = summary.calibration
        fitted = ", ".join(
            f"{name} {value:.3f} (sensitivity {c.sensitivity.get(name, float('nan')):.2f})"
            for name, value in c.constants.items()
        )
        line = (f"calibration: {fitted}, fitted on {len(c.rows)} rows (rms log error "
                f"{c.rms_log_error:.3f}, {c.evaluations} simulations)")  # fmt: skip
        if c.at_bound:
            line += f"; at a bound: {', '.join(c.at_bound)}"
        if c.unidentified():
            line += (f"; not identified by its rows (sensitivity under "
                     f"{IDENTIFIED_SENSITIVITY}): {', '.join(c.unidentified())}")  # fmt: skip
        lines.append(line)
    if summary.accuracy is not None:
        a = summary.accuracy
        lines.append(
            f"validation: {a.within_tolerance} of {a.rows} held-out rows within "
            f"+-{a.tolerance:.0%}, median |error| {a.median_abs_error:.1%}, worst "
            f"{a.worst} ({a.worst_error:+.1%}; an OOM counts as -100%)"
        )
    if summary.not_taken:
        reasons = Counter(n.reason.split(":")[0].split(" (")[0] for n in summary.not_taken)
        listed = "; ".join(f"{count} {reason}" for reason, count in reasons.most_common())
        lines.append(f"not taken: {len(summary.not_taken)} configurations ({listed})")
    return lines
