"""Accelerator telemetry for the terminal: a table per level (serving) or scenario
(training), then the sampler's cost."""

from __future__ import annotations

from collections.abc import Mapping

from rich.table import Table

from moeperf.collectors.accel_records import AcceleratorFigures, SamplerCost
from moeperf.collectors.telemetry_records import TelemetrySummary
from moeperf.reports.terminal.presentation import Item, Presentation, said_once

GIB = 2**30
MIB = 2**20


def _f(value: float | None, scale: float = 1.0, digits: int = 1) -> str:
    return "-" if value is None else f"{value * scale:.{digits}f}"


def level_items(
    scenario: str, figures: AcceleratorFigures, training: bool = False
) -> list[Table | str]:
    """A table of the accelerators (where the window has any), then a line per process."""
    items: list[Table | str] = []
    if any(d.source != "process" for d in figures.devices):
        items.append(level_table(scenario, figures, training))
    window_s = (figures.end_ns - figures.start_ns) / 1e9
    for d in figures.devices:
        if d.source == "process":
            items.append(
                f"{scenario}: target process {d.device} over {window_s:.2f} s: RSS peak "
                f"{_f(d.rss_peak_bytes, 1 / MIB)} MiB, CPU mean {_f(d.cpu_mean_ratio, 100)}% "
                "of a core"
            )
    return items


def level_table(scenario: str, figures: AcceleratorFigures, training: bool = False) -> Table:
    """The accelerators over one level (scenario, or the whole run), and their totals."""
    window_s = (figures.end_ns - figures.start_ns) / 1e9
    span = "its steps'" if training else "the measured"
    if scenario == "whole run":
        span = "its"
    tokens = (
        "the tokens of its completed steps; J/step: per completed step"
        if training
        else "the level's measured ok output tokens"
    )
    table = Table(
        title=f"{scenario}: accelerators over {span} {window_s:.2f} s",
        caption=(
            "util: time-weighted mean and max; memory: peak (GiB); energy: the device's "
            f"counter, else the integral of its power; per token: {tokens}"
        ),
    )
    columns: tuple[str, ...] = ("device", "util mean %", "util max %", "peak mem GiB", "power W",
               "energy J", "J/token", "tokens/J")  # fmt: skip
    if training:
        columns += ("J/step",)
    for i, column in enumerate(columns):
        table.add_column(column, justify="left" if i == 0 else "right")
    for d in figures.devices:
        if d.source == "process":
            continue  # a line of its own (level_items)
        memory = d.memory_peak_bytes
        energy = _f(d.energy_j)
        if d.energy_j is not None and d.energy_source is not None:
            energy += f" ({d.energy_source})"
        table.add_row(
            f"{d.source} {d.device}" + (f" {d.name}" if d.name else ""),
            _f(d.utilization_mean_ratio, 100),
            _f(d.utilization_max_ratio, 100),
            _f(memory, 1 / GIB, 2),
            _f(d.power_mean_w),
            energy,
            "",
            "",
            *([""] if training else []),
        )
    total = _f(figures.energy_j)
    if figures.energy_j is not None and figures.energy_source is not None:
        total += f" ({figures.energy_source})"
    table.add_row(
        f"all accelerators ({figures.tokens} tokens)",
        "",
        "",
        "",
        _f(figures.power_mean_w),
        total,
        _f(figures.energy_per_token_j, digits=4),
        _f(figures.tokens_per_j, digits=3),
        *([_f(figures.energy_per_step_j, digits=3)] if training else []),
    )
    return table


def cost_line(cost: SamplerCost | None) -> str:
    if cost is None:
        return "sampler: not run (no source available)"
    line = (
        f"sampler: {cost.reads} reads every {cost.period_s:g} s over {cost.run_s:.1f} s; "
        f"read mean {_f(cost.read_mean_s, 1e3, 2)} ms, max {_f(cost.read_max_s, 1e3, 2)} ms; "
        f"CPU {_f(cost.cpu_ratio, 100, 2)}% of a core; {cost.ticks_missed} ticks missed"
    )
    for errors in cost.errors:
        line += f"; {errors.count} failed reads of {errors.source} (last: {errors.last})"
    return line


def telemetry_lines(
    telemetry: TelemetrySummary,
    by_name: Mapping[str, AcceleratorFigures | None],
    training: bool = False,
    missing: str | None = None,
) -> Presentation:
    """What ``moeperf runs show`` prints for [telemetry]: the whole run's accelerators
    (the answer, where there are any); a table per level (scenario), the sampler's cost
    and, once, why it read nothing at all (detail: the run's telemetry note says it too);
    and each level without figures although the sampler read some (unavailable).
    ``missing``: why such a level has none (the suite's default otherwise)."""
    if missing is None:
        missing = (
            "its scenarios ran interleaved" if training else "no sample in its measured window"
        )
    detail: list[Item] = []
    unavailable: list[str] = []
    for scenario, figures in by_name.items():
        if figures is not None:
            detail += level_items(scenario, figures, training)
        elif telemetry.samples == 0:
            # The sampler read nothing: why is the run's telemetry note, printed with its
            # notes; not once per level again.
            detail.append(f"accelerators: not available: {telemetry.unavailable_text()}")
        else:
            unavailable.append(f"{scenario} accelerators: not available: {missing}")
    answer: list[Item] = []
    if telemetry.run is not None:
        whole = level_items("whole run", telemetry.run, training)
        accelerators = any(d.source != "process" for d in telemetry.run.devices)
        (answer if accelerators else detail).extend(whole)
    # A source that is not there is in the run's telemetry note already (printed with
    # the run's notes): detail here.
    for status in telemetry.sources:
        if status.unavailable is not None:
            detail.append(f"telemetry {status.source}: not available: {status.unavailable}")
    detail.append(cost_line(telemetry.cost))
    return Presentation(answer=answer, detail=said_once(detail), unavailable=said_once(unavailable))
