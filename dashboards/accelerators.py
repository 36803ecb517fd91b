"""The accelerators row: what the GPUs (and a local target's process) did during the load.

Series come from the run's device sampler (collectors.sources.accel_sampler): NVML on the harness's
host, a DCGM exporter for remote hosts, the process tree of a target moeperf started. Split
by target and device; a device's series carry no scenario (one continuous line per GPU).
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as dashboard_b

from moeperf.collectors.export import metric_names as m

from .panels import Query, row, timeseries_panel, unit_of
from .promql import gauge, rate, ratio

BY = ("target", "device")
LEGEND = "{{target}} {{device}}"


def accelerator_row(d: dashboard_b.Dashboard, tokens: m.Metric, what: str) -> None:
    """The row; energy per token is over ``tokens`` (``what`` says which, in the panel's
    description): output tokens of a serving run, tokens trained on of a training run."""
    d.with_row(row("Accelerators"))
    for title, metric in (
        ("Device utilisation", m.DEVICE_UTILIZATION),
        ("Device power", m.DEVICE_POWER),
    ):
        d.with_panel(
            timeseries_panel(
                title,
                unit_of(metric),
                [Query(gauge(metric, BY), LEGEND)],
                metric.help,
                width=8,
                min_value=0,
            )
        )
    d.with_panel(
        timeseries_panel(
            "Device memory",
            unit_of(m.DEVICE_MEMORY_USED),
            [
                Query(gauge(m.DEVICE_MEMORY_USED, BY), f"{LEGEND} used"),
                Query(gauge(m.DEVICE_MEMORY_TOTAL, BY), f"{LEGEND} total"),
            ],
            f"{m.DEVICE_MEMORY_USED.help} {m.DEVICE_MEMORY_TOTAL.help}",
            width=8,
            min_value=0,
        )
    )
    joules = rate(m.DEVICE_ENERGY, ("target",))
    d.with_panel(
        timeseries_panel(
            "Energy per token",
            unit_of(m.DEVICE_ENERGY),
            [Query(ratio(joules, rate(tokens, ("target",))), "{{target}}")],
            f"Joules the target's accelerators used per {what}, over each rate interval "
            "(every device of the target). Reports give it per level or scenario, over its "
            "own window.",
            width=8,
            min_value=0,
        )
    )
    for title, metric in (
        ("Device temperature", m.DEVICE_TEMPERATURE),
        ("Device SM clock", m.DEVICE_SM_CLOCK),
    ):
        d.with_panel(
            timeseries_panel(
                title, unit_of(metric), [Query(gauge(metric, BY), LEGEND)], metric.help, width=8
            )
        )
    for title, metric in (
        ("Target process memory (RSS)", m.TARGET_PROCESS_RSS),
        ("Target process CPU", m.TARGET_PROCESS_CPU),
    ):
        d.with_panel(
            timeseries_panel(
                title,
                unit_of(metric),
                [Query(gauge(metric, ("target",)), "{{target}}")],
                metric.help,
                width=12,
                min_value=0,
            )
        )
