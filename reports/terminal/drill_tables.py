"""A fault drill for the terminal: one row per fault, then the request audit."""

from __future__ import annotations

from rich.table import Table

from moeperf.collectors.drill_records import DrillSummary, LatencyWindow


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _ms(window: LatencyWindow) -> str:
    if window.ttft_p50_s is None:
        return "-"
    return f"{window.ttft_p50_s * 1e3:.0f} ({window.requests})"


def _caught(requests_hit: int | None) -> str:
    if requests_hit is None:
        return "-"
    return "0 (NOT TESTED)" if requests_hit == 0 else str(requests_hit)


def drill_table(drill: DrillSummary) -> Table:
    table = Table(
        title=f"fault drill ({drill.scenario}): per fault",
        caption=(
            "at / fault / recovery: s from the level's start / the fault's own length / its "
            "injection to the first success of a request sent after it that ended after "
            "the fault; caught: requests the target says a window caught (0: not "
            "tested); TTFT p50 ms (ok "
            f"requests) sent in the {drill.compare_window_s:g} s before, between injection "
            "and recovery, and in the same window after"
        ),
    )
    for column in ("fault", "at s", "fault s", "caught", "failed", "why", "recovery s"):
        table.add_column(column, justify="left" if column in ("fault", "why") else "right")
    for column in ("TTFT before", "TTFT during", "TTFT after"):
        table.add_column(column, justify="right")
    for fault in drill.faults:
        why = ", ".join(f"{k}={v}" for k, v in sorted(fault.failed_by_type.items())) or "-"
        name = fault.kind if fault.injected else f"{fault.kind} (NOT INJECTED)"
        table.add_row(
            name,
            f"{fault.at_s:.2f}",
            _s(fault.fault_s),
            _caught(fault.requests_hit),
            str(fault.failed),
            why,
            _s(fault.recovery_s) if fault.recovery_s is not None else "not recovered",
            _ms(fault.before),
            _ms(fault.during),
            _ms(fault.after),
        )
    return table
