"""The `moeperf baseline promote | list | show` commands (presenting; the store is in
reports/baselines.py)."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from moeperf.collectors.errors import CollectorError
from moeperf.collectors.quantiles import Described
from moeperf.collectors.serving_records import ServingSummary
from moeperf.collectors.store import RunStore
from moeperf.reports.baseline_names import parse_ref
from moeperf.reports.baselines import BaselineStore, _run_data
from moeperf.reports.errors import ReportUsageError


def _render(table: Table) -> str:
    text = io.StringIO()
    console = Console(file=text, width=140, color_system=None, force_terminal=False, markup=False)
    console.print(table)
    return text.getvalue().rstrip("\n")


def promote_command(
    run_ref: str,
    name: str,
    version: int | None,
    runs_dir: str,
    root: str,
    force: bool,
    out: Callable[[str], Any] = print,
) -> int:
    try:
        reader = RunStore(runs_dir).open(run_ref)
    except (CollectorError, OSError, ValueError) as exc:
        raise ReportUsageError(str(exc)) from None
    # Refused unless forced (ReportUsageError, exit 2, saying why); forced, it is said here
    # and kept in the version's baseline.json.
    baseline = BaselineStore(root).promote(reader, name, version, force=force)
    status = baseline.run_status
    if baseline.run_status_reason:
        status += f": {baseline.run_status_reason}"
    out(f"promoted run {baseline.source_run_id} ({status}) as baseline {baseline.ref}")
    for problem in baseline.forced:
        out(f"  promoted with --force although {problem}")
    out(f"  {baseline.path}  content hash {baseline.content_hash}")
    out(f"  commit it: git add {baseline.path}")
    return 0


def list_command(root: str, out: Callable[[str], Any] = print) -> int:
    summaries = BaselineStore(root).list()
    if not summaries:
        out(f"no baselines under {root}/ (moeperf baseline promote RUN --name NAME)")
        return 0
    table = Table(title="baselines")
    for column in ("name", "versions", "latest", "created (UTC)", "host CPU"):
        table.add_column(column)
    for s in summaries:
        table.add_row(
            Text(s.name),
            ", ".join(map(str, s.versions)),
            str(s.latest),
            Text(s.created),
            Text(s.host_cpu or "-"),
        )
    out(_render(table))
    return 0


def _quantiles(stats: Described) -> str:
    """One latency metric of a summary as "p50 / p99 (n=count)", in milliseconds."""
    if not stats.count:
        return "-"

    def ms(q: float) -> str:
        value = stats.value_at(q)
        return "-" if value is None else f"{value * 1e3:.2f}"

    return f"{ms(0.5)} / {ms(0.99)} (n={stats.count})"


def show_command(ref: str, root: str, out: Callable[[str], Any] = print) -> int:
    store = BaselineStore(root)
    baseline = store.get(*parse_ref(ref))
    data = _run_data(baseline)
    host = baseline.host
    gpus = ", ".join(g.get("name", "?") for g in host.get("gpus") or []) or "none"
    status = baseline.run_status
    if baseline.run_status_reason:
        status += f" ({baseline.run_status_reason})"
    out(
        f"baseline {baseline.ref}  (versions: {', '.join(map(str, store.versions(baseline.name)))})"
    )
    out(f"  created       {baseline.created}")
    out(f"  source run    {baseline.source_run_id}  suite {baseline.suite or '-'}  {status}")
    out(
        f"  host          {host.get('cpu_model', '?')}, {host.get('logical_cores', '?')} cores, "
        f"GPUs: {gpus}"
    )
    out(f"  records       requests: {len(data.requests)}, steps: {len(data.steps)}")
    out(f"  content hash  {baseline.content_hash}")
    for forced in baseline.forced:
        out(f"  forced        although {forced}")
    summary = data.summary
    scenarios = summary.scenarios if isinstance(summary, ServingSummary) else {}
    if not scenarios:
        out("  no serving scenarios in its summary")
        return 0
    table = Table(title="summary (latencies in ms: p50 / p99, n = samples)")
    for column in ("scenario", "ok / requests", "TTFT", "TPOT", "ITL", "output tok/s"):
        table.add_column(column)
    for scenario, entry in scenarios.items():
        latency = entry.latency_s
        throughput = entry.output_throughput_tok_s
        table.add_row(
            Text(str(scenario)),
            f"{entry.ok} / {entry.requests}",
            _quantiles(latency.ttft_s),
            _quantiles(latency.tpot_s),
            _quantiles(latency.itl_s),
            "-" if throughput is None else f"{throughput:.1f}",
        )
    out(_render(table))
    return 0
