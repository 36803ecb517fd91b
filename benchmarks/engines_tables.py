"""The engines benchmark's table (benchmarks/engines.py): one row per stream count, each
measure's engines side by side, printed with rich or as Markdown for a README.

Apart from the runs: presenting only, every cell a field of a ``LevelResult`` or the
budget's verdict on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engines_budget import ErrorBudget, budget_misses
from engines_results import ENGINES, LevelResult, Quantiles
from rich.table import Table


def ms_text(value: float | None, digits: int = 2) -> str:
    """Seconds as milliseconds, ``digits`` decimals; "n/a" when not measured."""
    return "n/a" if value is None else f"{value * 1e3:.{digits}f}"


def _pair(q: Quantiles) -> str:
    return f"{ms_text(q.p50)}/{ms_text(q.p99)}"


def _lag(result: LevelResult) -> str:
    """The worst worker's loop lag p99 and the longest lag seen by any worker."""
    worst = max(result.loop_lag_p99_s, default=None)
    return f"{ms_text(worst)}/{ms_text(max(result.loop_lag_max_s, default=None))}"


def _percent(fractions: Sequence[float]) -> str:
    return " + ".join(f"{f:.0%}" for f in fractions) or "n/a"


def _status(result: LevelResult, budget: ErrorBudget) -> str:
    level = "client-bound" if result.client_bound else result.status
    return f"{level}; {'within' if not budget_misses(result, budget) else 'over'}"


CELLS: tuple[tuple[str, Any], ...] = (
    ("requests (matched/ unmatched)", lambda r, _b: f"{r.requests} ({r.matched}/{r.unmatched})"),
    ("TTFT err p50/p99 ms", lambda r, _b: _pair(r.ttft)),
    ("ITL err p50/p99 ms", lambda r, _b: _pair(r.itl)),
    ("chunk err p50/p99 ms", lambda r, _b: _pair(r.chunk)),
    ("loop lag p99/max ms", lambda r, _b: _lag(r)),
    ("CPU per worker", lambda r, _b: _percent(r.cpu_fraction)),
    ("level; budget", _status),
)


def _rows(results: Sequence[LevelResult], budget: ErrorBudget) -> list[list[str]]:
    by = {(r.streams, r.engine): r for r in results}
    rows = []
    for streams in sorted({r.streams for r in results}):
        row = [str(streams)]
        for _name, cell in CELLS:
            for engine in ENGINES:
                result = by.get((streams, engine))
                row.append(cell(result, budget) if result else "not run")
        rows.append(row)
    return rows


def _headers(between: str = " ") -> list[str]:
    return ["streams"] + [f"{name}{between}{engine}" for name, _ in CELLS for engine in ENGINES]


def results_table(results: Sequence[LevelResult], budget: ErrorBudget, title: str) -> Table:
    """One row per stream count, each measure's engines side by side."""
    table = Table(title=title)
    for header in _headers("\n"):
        table.add_column(header, justify="left" if header.startswith("level") else "right")
    for row in _rows(results, budget):
        table.add_row(*row)
    return table


def markdown_table(results: Sequence[LevelResult], budget: ErrorBudget) -> str:
    """The same table as Markdown (for a README)."""
    headers = _headers()
    aligns = ["---" if h.startswith("level") else "---:" for h in headers]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(aligns) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in _rows(results, budget)]
    return "\n".join(lines)
