"""The simulation suite's tables (rich), from a run's summary (``SimulationSummary``).

Presenting only: every number is a summary field, scaled; every title says simulated, and
the paper's figures sit in a column labelled as the paper's.
"""

from __future__ import annotations

from rich.table import Table

from moeperf.collectors.simulation_summary import SimulationSummary
from moeperf.collectors.store import RunReader
from moeperf.reports.figures.cluster_sim import published_lines
from moeperf.reports.terminal.levels import cell, headed_table
from moeperf.reports.terminal.presentation import Presentation

GB = 1e9


def scenario_table(summary: SimulationSummary) -> Table:
    table = headed_table(
        "Cluster simulation (simulated): per job, policy and skew",
        ["job", "policy", "skew", "devices", "params B", "layout", "OOM rate", "step s p50",
         "MFU", "effective MFU", "eff. tok/s/dev", "bubble", "(p-1)/(m+p-1)", "peak GB",
         "memory GB", "moved s", "plan ms p50"],
        3,
    )  # fmt: skip
    for e in summary.scenarios.values():
        table.add_row(
            e.job, e.policy, e.skew, f"{e.devices:,}", f"{e.parameters / 1e9:.0f}", e.layout,
            f"{e.oom_rate:.0%}", cell(e.step_time_p50_s, ".2f"), cell(e.mfu_mean, ".1%"),
            f"{e.effective_mfu:.1%}", f"{e.effective_tokens_per_s_per_device:.0f}",
            cell(e.bubble, ".1%"), f"{e.bubble_formula:.1%}",
            f"{max(e.peak_memory_bytes_by_stage) / GB:.1f}", f"{e.memory_bytes / GB:.0f}",
            f"{e.moved_s_mean:.2f}", cell(e.decision_s_p50, ".2f", 1e3),
        )  # fmt: skip
    return table


def ablation_table(summary: SimulationSummary) -> Table:
    table = headed_table(
        "Ablation (simulated) beside seed 000's figures (the paper's numbers, not ours)",
        ["job", "skew", "step", "policy", "over", "speedup (simulated)", "paper (seed 000)"],
        5,
    )
    for r in summary.ablation:
        table.add_row(r.job, r.skew, r.step, r.policy, r.baseline,
                      cell(r.speedup, ".2f") + ("x" if r.speedup else ""), r.paper)  # fmt: skip
    return table


def reproduction_table(summary: SimulationSummary) -> Table:
    table = headed_table(
        "Published MoE training runs against the simulator (simulated)",
        ["run", "role", "layout", "policy", "recipe", "metric", "published", "simulated",
         "error"],
        1,
    )  # fmt: skip
    for r in summary.reproductions:
        table.add_row(
            r.name, r.role, r.layout, r.policy, r.recipe, r.metric, f"{r.published:,.0f}",
            cell(r.simulated, ",.0f"), cell(r.error, "+.1%"),
        )  # fmt: skip
    return table


def simulation_tables(summary: SimulationSummary) -> list[Table]:
    tables = [scenario_table(summary)] if summary.scenarios else []
    if summary.ablation:
        tables.append(ablation_table(summary))
    if summary.reproductions:
        tables.append(reproduction_table(summary))
    return tables


def simulation_lines(summary: SimulationSummary, reader: RunReader) -> Presentation:
    """What ``moeperf runs show`` prints of a simulation run: its tables and the published
    figures beside them (the answer; every figure simulated, which the tables say), and
    every assumption the simulator made (detail)."""
    return Presentation(
        answer=[*simulation_tables(summary), *published_lines(summary)],
        detail=[f"assumption: {assumption}" for assumption in summary.assumptions],
    )
