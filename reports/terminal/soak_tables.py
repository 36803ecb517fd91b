"""A soak for the terminal: its windows, then one row per verdict with the slope behind it."""

from __future__ import annotations

from rich.table import Table

from moeperf.collectors.soak_records import SoakSummary, SoakWindow

MIB = 2**20


def _f(value: float | None, scale: float = 1.0, digits: int = 1) -> str:
    return "-" if value is None else f"{value * scale:.{digits}f}"


def windows_table(soak: SoakSummary) -> Table:
    table = Table(
        title=f"soak ({soak.scenario}): {len(soak.windows)} windows of {soak.window_s:g} s",
        caption=(
            "start s: from the level's start; ok: requests sent in the window that succeeded; "
            "output tok/s: tokens that arrived in the window / its length; TTFT and TPOT of "
            f"the ok requests sent in it; RSS: mean of the target's memory ({soak.memory_source}"
            f", every {soak.memory_interval_s:g} s); KV: mean usage over the scrapes in it"
        ),
    )
    columns = ("start s", "ok", "failed", "output tok/s", "TTFT p50 ms", "TTFT p99 ms",
               "TPOT p50 ms", "RSS MiB", "KV %", "preempted")  # fmt: skip
    for column in columns:
        table.add_column(column, justify="right")
    for w in soak.windows:
        table.add_row(*_window_row(w))
    return table


def _window_row(w: SoakWindow) -> tuple[str, ...]:
    return (
        f"{w.start_s:.0f}",
        str(w.requests_ok),
        str(w.requests_failed),
        _f(w.output_tok_s),
        _f(w.ttft_p50_s, 1e3),
        _f(w.ttft_p99_s, 1e3),
        _f(w.tpot_p50_s, 1e3, 2),
        _f(w.rss_bytes, 1 / MIB),
        _f(w.kv_usage_ratio, 100),
        _f(w.preemptions, digits=0),
    )


def verdicts_table(soak: SoakSummary) -> Table:
    table = Table(
        title=f"soak ({soak.scenario}): verdicts",
        caption=(
            "slopes: least squares over the windows, 95% interval (t with n - 2 degrees of "
            "freedom), per hour and in % of the first window per hour; a verdict is found "
            "only when the whole interval clears its threshold"
        ),
    )
    table.add_column("verdict", justify="left")
    table.add_column("outcome", justify="left")
    table.add_column("why", justify="left", overflow="fold")
    for v in soak.verdicts:
        outcome = v.outcome.upper() if v.outcome == "found" and v.fails_run else v.outcome
        table.add_row(v.name, outcome, v.reason)
    return table
