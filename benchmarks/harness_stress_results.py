"""One case of the harness stress benchmark (benchmarks/harness_stress.py): what was sent
and stored, the ground truth, the memory; its exactness checks, and the table that puts two
cases side by side.

Apart from the runs that measure a case (harness_stress.py): everything here only reads a
finished case, so it is tested without a run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rich.table import Table

MIB = 2**20


def per_thousand_mib(grown_bytes: float, requests: int) -> float:
    """MiB per 1,000 requests (nan without requests)."""
    return grown_bytes / MIB / requests * 1000 if requests else math.nan


@dataclass(frozen=True)
class CaseResult:
    """One run of the benchmark: what was sent and stored, the truth, the memory."""

    factor: int
    rate: float
    run_status: str
    level_status: str
    client_bound: tuple[str, ...]  # the harness's [harness] checks, whatever the status
    sent: int
    offered: int
    records: int
    record_ids: int
    ok: int
    errors: Mapping[str, int]
    cancelled: int
    target_ok: int
    injected_errors: int
    # The harness's own check (measured phase): ok requests matched to the target's
    # ground truth by response id, and those that could not be; None: not compared.
    ground_truth_matched: int | None
    ground_truth_unmatched: int | None
    parent_start: int  # RSS after imports
    parent_level_start: int  # RSS as the level starts (target up, prompts built)
    parent_level_end: int  # RSS once every record is in, before the summary is written
    parent_peak: int
    parent_hwm: int  # VmHWM: the true peak, between samples too
    workers_level_start: int
    workers_peak: int
    worker_max: int
    samples: int
    level_s: float
    wall_s: float

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    @property
    def records_exact(self) -> bool:
        """Every request the workers sent is stored, once, and ended one way."""
        return (
            self.records == self.record_ids == self.sent
            and self.ok + self.error_count + self.cancelled == self.records
        )

    @property
    def errors_exact(self) -> bool:
        """The errors are the faults the target injected (HTTP 500s, each one), and the
        oks are the requests it answered in full."""
        return (
            self.errors.get("http_5xx", 0) == self.error_count == self.injected_errors
            and self.ok == self.target_ok
        )

    @property
    def exact(self) -> bool:
        return self.records_exact and self.errors_exact

    @property
    def parent_growth(self) -> int:
        return self.parent_peak - self.parent_level_start

    @property
    def workers_growth(self) -> int:
        return self.workers_peak - self.workers_level_start


def _ratio(high: float, low: float) -> str:
    return f"{high / low:.2f}" if low else "n/a"


def _matched(case: CaseResult) -> str:
    matched, unmatched = case.ground_truth_matched, case.ground_truth_unmatched
    if matched is None or unmatched is None:
        return "n/a"
    return f"{matched:,} of {matched + unmatched:,}"


def results_table(low: CaseResult, high: CaseResult) -> Table:
    """One row per measure, the two runs side by side and the stress run over the normal."""
    table = Table(title="the harness under stress: synthetic target, error_rate 0.5")
    table.add_column("")
    for column in (f"{low.factor}x", f"{high.factor}x", f"{high.factor}x / {low.factor}x"):
        table.add_column(column, justify="right")
    mib = MIB

    def row(
        name: str,
        of: Callable[[CaseResult], Any],
        text: Callable[[Any], str] = str,
        ratio: bool = True,
    ) -> None:
        a, b = of(low), of(high)
        table.add_row(name, text(a), text(b), _ratio(b, a) if ratio else "")

    row("rate (requests/s)", lambda c: c.rate, lambda v: f"{v:g}")
    row("requests sent", lambda c: c.sent, lambda v: f"{v:,}")
    row("records stored (ids)", lambda c: c.record_ids, lambda v: f"{v:,}")
    row("ok", lambda c: c.ok, lambda v: f"{v:,}", ratio=False)
    row("errors (http_5xx)", lambda c: c.error_count, lambda v: f"{v:,}", ratio=False)
    row("faults injected (target)", lambda c: c.injected_errors, lambda v: f"{v:,}", False)
    row("target's ok (ground truth)", lambda c: c.target_ok, lambda v: f"{v:,}", False)
    row("measured oks matched to ground truth", _matched, ratio=False)
    row("records exact", lambda c: "yes" if c.records_exact else "NO", ratio=False)
    row("errors = faults injected", lambda c: "yes" if c.errors_exact else "NO", ratio=False)
    row("parent RSS at level start (MiB)", lambda c: c.parent_level_start / mib, "{:.1f}".format)
    row("parent RSS at level end (MiB)", lambda c: c.parent_level_end / mib, "{:.1f}".format)
    row("parent RSS peak (MiB)", lambda c: c.parent_peak / mib, "{:.1f}".format)
    row("parent growth (MiB)", lambda c: c.parent_growth / mib, "{:.1f}".format)
    row("parent growth per 1k requests (MiB)",
        lambda c: per_thousand_mib(c.parent_growth, c.sent), "{:.2f}".format)  # fmt: skip
    row("workers RSS peak, sum (MiB)", lambda c: c.workers_peak / mib, "{:.1f}".format)
    row("workers growth (MiB)", lambda c: c.workers_growth / mib, "{:.1f}".format)
    row("workers growth per 1k requests (MiB)",
        lambda c: per_thousand_mib(c.workers_growth, c.sent), "{:.2f}".format)  # fmt: skip
    row("client-bound", lambda c: "yes" if c.client_bound else "no", ratio=False)
    row("level / run status", lambda c: f"{c.level_status} / {c.run_status}", ratio=False)
    row("level (s)", lambda c: c.level_s, "{:.1f}".format, ratio=False)
    row("wall (s)", lambda c: c.wall_s, "{:.1f}".format)
    return table


def marginal_bytes_per_request(low: CaseResult, high: CaseResult, measure: str) -> float:
    """The slope of an RSS measure (a ``CaseResult`` field: ``parent_peak``,
    ``workers_peak``...) over requests sent between two cases: what one more request
    costs, the fixed part left out."""
    grown = getattr(high, measure) - getattr(low, measure)
    return grown / (high.sent - low.sent) if high.sent != low.sent else math.nan
