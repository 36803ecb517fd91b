"""What each device did during the run: one row of panels per device, the levels marked.

A GPU (NVML or DCGM) gets utilisation (%) and memory used (GiB) on its left axis's panel
and power (W) on its own panel; the target's process tree (the process source) gets its
resident memory (MiB) and CPU (% of a core). x is seconds on the run's clock; every
sample is drawn as it was read (no smoothing), and each load level is a shaded band from
its first to its last sample labelled with it, so a figure can be read against its level.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from moeperf.collectors.accel_records import DeviceSample
from moeperf.reports.figures.text import color, empty, plotly_text, styled

GIB = 2**30
MIB = 2**20

Value = Callable[[DeviceSample], float | None]


@dataclass(frozen=True, slots=True)
class _Panel:
    title: str
    series: tuple[tuple[str, Value], ...]


def _scaled(field: str, scale: float) -> Value:
    def value(sample: DeviceSample) -> float | None:
        raw = getattr(sample, field)
        return None if raw is None else raw * scale

    return value


_GPU = (
    _Panel(
        "utilisation (%) and memory used (GiB)",
        (
            ("utilisation %", _scaled("utilization_ratio", 100)),
            ("memory used GiB", _scaled("memory_used_bytes", 1 / GIB)),
        ),
    ),
    _Panel("power (W)", (("power W", _scaled("power_w", 1)),)),
)
_PROCESS = (
    _Panel(
        "target process: RSS (MiB) and CPU (% of a core)",
        (
            ("RSS MiB", _scaled("rss_bytes", 1 / MIB)),
            ("CPU %", _scaled("cpu_ratio", 100)),
        ),
    ),
)


def _devices(samples: Sequence[DeviceSample]) -> dict[tuple[str, str, str], list[DeviceSample]]:
    devices: dict[tuple[str, str, str], list[DeviceSample]] = {}
    for sample in samples:
        devices.setdefault((sample.source, sample.host, sample.device), []).append(sample)
    return devices


def level_spans(samples: Sequence[DeviceSample]) -> list[tuple[str, float, float]]:
    """(scenario, first s, last s) of each run of samples labelled with one level."""
    spans: list[tuple[str, float, float]] = []
    for sample in sorted(samples, key=lambda s: s.t_ns):
        t_s = sample.t_ns / 1e9
        if not sample.scenario:
            continue
        if spans and spans[-1][0] == sample.scenario:
            spans[-1] = (sample.scenario, spans[-1][1], t_s)
        else:
            spans.append((sample.scenario, t_s, t_s))
    return spans


def accelerator_chart(
    samples: Sequence[DeviceSample], title: str = "Devices over the run"
) -> go.Figure:
    devices = _devices(samples)
    if not devices:
        return empty(title, "no device was sampled")
    rows: list[tuple[str, _Panel, list[DeviceSample]]] = []
    for (source, host, device), mine in devices.items():
        name = f"{source} {host} {device}" + (f" ({mine[0].name})" if mine[0].name else "")
        for panel in _PROCESS if source == "process" else _GPU:
            rows.append((name, panel, mine))
    fig = make_subplots(
        rows=len(rows),
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.05,
        subplot_titles=[plotly_text(f"{name}: {panel.title}") for name, panel, _ in rows],
    )
    for row, (name, panel, mine) in enumerate(rows, start=1):
        x = [s.t_ns / 1e9 for s in mine]
        for index, (label, value) in enumerate(panel.series):
            y = [value(s) for s in mine]
            if all(v is None for v in y):
                continue  # the source cannot read it: no line rather than a line at 0
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=y,
                    mode="lines",
                    name=plotly_text(f"{name}: {label}"),
                    line={"color": color(index)},
                    hovertemplate=f"t=%{{x:.1f}} s<br>%{{y:.4g}}<extra>{plotly_text(label)}"
                    "</extra>",
                ),
                row=row,
                col=1,
            )
    for index, (scenario, start_s, end_s) in enumerate(level_spans(samples)):
        fig.add_vrect(
            x0=start_s,
            x1=end_s,
            fillcolor=color(index + 3),
            opacity=0.08,
            line_width=0,
            annotation_text=plotly_text(scenario),
            annotation_position="top left",
        )
    fig.update_xaxes(title_text="seconds on the run's clock", row=len(rows))
    return styled(fig, title, height=200 * len(rows) + 140)
