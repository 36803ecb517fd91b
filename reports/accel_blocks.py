"""Accelerator telemetry in the report: the figures per level and device, the sampler's own
cost, and the devices over time. Definitions in ``collectors.accel_figures`` (quoted in the
page's appendix); the same figures as ``moeperf runs show``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from moeperf.collectors.accel_records import AcceleratorFigures, DeviceSample
from moeperf.collectors.telemetry_records import TelemetrySummary
from moeperf.reports.figures.accelerators import accelerator_chart
from moeperf.reports.render import Chart, Table

GIB = 2**30
MIB = 2**20


def _scaled(value: float | None, scale: float) -> float | None:
    return None if value is None else value * scale


def _figures_table(by_name: Mapping[str, AcceleratorFigures | None]) -> pd.DataFrame:
    rows = []
    for scenario, figures in by_name.items():
        if figures is None:
            continue
        for device in figures.devices:
            rows.append(
                {
                    "level": scenario,
                    "device": f"{device.source} {device.host} {device.device}",
                    "samples": device.samples,
                    "util mean %": _scaled(device.utilization_mean_ratio, 100),
                    "util max %": _scaled(device.utilization_max_ratio, 100),
                    "memory peak GiB": _scaled(device.memory_peak_bytes, 1 / GIB),
                    "memory peak %": _scaled(device.memory_peak_ratio, 100),
                    "power mean W": device.power_mean_w,
                    "energy J": device.energy_j,
                    "energy from": device.energy_source,
                    "RSS peak MiB": _scaled(device.rss_peak_bytes, 1 / MIB),
                    "CPU mean %": _scaled(device.cpu_mean_ratio, 100),
                }
            )
        if all(d.source == "process" for d in figures.devices):
            continue  # no accelerator: nothing to total
        rows.append(
            {
                "level": scenario,
                "device": "all accelerators",
                "power mean W": figures.power_mean_w,
                "energy J": figures.energy_j,
                "energy from": figures.energy_source,
                "J / token": figures.energy_per_token_j,
                "J / request": figures.energy_per_request_j,
                "J / step": figures.energy_per_step_j,
                "tokens / J": figures.tokens_per_j,
            }
        )
    # A column no row has (J / step in a serving run) says nothing.
    return pd.DataFrame(rows).dropna(axis="columns", how="all")


def _cost_text(telemetry: TelemetrySummary) -> str:
    cost = telemetry.cost
    if cost is None:
        return "the sampler did not run"
    parts = [f"{cost.reads} reads every {cost.period_s * 1e3:g} ms over {cost.run_s:.1f} s"]
    if cost.read_mean_s is not None and cost.read_max_s is not None:
        parts.append(
            f"a read took {cost.read_mean_s * 1e3:.2f} ms on average, "
            f"{cost.read_max_s * 1e3:.2f} ms at most"
        )
    if cost.cpu_ratio is not None:
        parts.append(f"the sampler's thread used {cost.cpu_ratio * 100:.2f}% of a core")
    parts.append(f"{cost.ticks_missed} ticks missed (a read overran its period)")
    for errors in cost.errors:
        parts.append(f"{errors.count} failed reads of {errors.source} (last: {errors.last})")
    return "; ".join(parts)


def accelerator_blocks(
    telemetry: TelemetrySummary,
    by_name: Mapping[str, AcceleratorFigures | None],
    samples: Sequence[DeviceSample],
    training: bool = False,
) -> list[Chart | Table]:
    """The section of a run with [telemetry]; ``by_name``: each level's (serving) or
    scenario's (training) figures."""
    on = [s.name for s in telemetry.sources if s.name]
    off = [f"{s.source}: {s.unavailable}" for s in telemetry.sources if s.unavailable]
    sources = "Sources read: " + (", ".join(on) if on else "none") + "."
    if off:
        sources += " Not available: " + "; ".join(off) + "."
    figures = _figures_table({**by_name, "whole run": telemetry.run})
    blocks: list[Chart | Table] = []
    if figures.empty:
        blocks.append(
            Table(
                pd.DataFrame({"accelerator figures": ["not available"]}),
                f"Accelerators: no figure for any level. {sources}",
            )
        )
    else:
        window = (
            "per scenario, over its steps' span (first step's start to last step's end); "
            "J / token and J / step are the energy of all accelerators over the tokens and "
            "the steps of its completed steps; 'whole run' over every completed step"
            if training
            else "per level, over the level's measured window; J / token is the energy of "
            "all accelerators over the output tokens of the level's ok measured requests, "
            "J / request over their count; 'whole run' from the first measured send of any "
            "level to the last completion (the gaps between levels and their warm-ups "
            "included: what the run cost), over every level's tokens and requests"
        )
        blocks.append(
            Table(
                figures,
                f"Accelerators {window}. Utilisation and power are time-weighted means of the "
                "samples (trapezoids), memory and RSS the largest reading; energy is the "
                "device's own energy counter's increase where it has one, else the integral "
                f"of its power ('energy from' says which). {sources}",
            )
        )
    blocks.append(
        Chart(
            accelerator_chart(samples),
            f"Each device as sampled every {telemetry.period_s * 1e3:g} ms, the "
            f"{'scenarios' if training else 'load levels'} shaded. The sampler's own cost: "
            f"{_cost_text(telemetry)}.",
            drawn_by=("accelerators",),
        )
    )
    return blocks
