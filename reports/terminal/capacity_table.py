"""A capacity search for the terminal: its probes in the order run, and the answer."""

from __future__ import annotations

from rich.table import Table

from moeperf.collectors.capacity_records import CapacitySummary

_VERDICT = {True: "held", False: "failed", None: "not judged"}


def capacity_table(summary: CapacitySummary) -> Table:
    unit = summary.unit
    table = Table(
        title=f"capacity for {summary.criteria}: {summary.answer()}",
        caption=f"search {summary.status}; each probe is one load level of the run",
    )
    for column in ("probe", unit, "phase", "SLOs", "why"):
        table.add_column(column)
    for number, probe in enumerate(summary.probes, start=1):
        table.add_row(
            str(number), f"{probe.level:g}", probe.phase, _VERDICT[probe.passed], probe.reason
        )
    return table
