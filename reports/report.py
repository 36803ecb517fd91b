"""The HTML report of one or more runs: figures chosen by run kind, rendered as one page.

``moeperf report RUN...`` calls ``report_command``; ``build_report`` is the pure part
(runs in, HTML out). Metrics come from ``collectors`` (per-request latencies, ITL samples,
the summary); this module only picks what to show for a serving, training or micro run.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any

from moeperf.collectors.errors import CollectorError
from moeperf.collectors.store import RunStore
from moeperf.registry import find_suite
from moeperf.reports.appendix import appendix_html
from moeperf.reports.errors import ReportUsageError
from moeperf.reports.page_path import choose_page_path, several_runs_name
from moeperf.reports.plotlyjs import PlotlyJs, how_it_opens, place_beside
from moeperf.reports.render import (
    Details,
    Section,
    pretty_json,
    render_page,
    write_page,
)
from moeperf.reports.request_view import request_facts
from moeperf.reports.runs import RunData, load_run, resolved_spec

GIB = 2**30


def _host_line(host: Mapping[str, Any]) -> str:
    parts = [str(host.get("cpu_model", "unknown CPU"))]
    if host.get("usable_cores") or host.get("logical_cores"):
        parts.append(f"{host.get('usable_cores') or host.get('logical_cores')} cores")
    if host.get("memory_bytes"):
        parts.append(f"{host['memory_bytes'] / GIB:.0f} GiB")
    gpus = host.get("gpus") or []
    if gpus:
        names = ", ".join(str(g.get("name", "GPU")) for g in gpus)
        driver = gpus[0].get("driver_version")
        parts.append(f"GPUs: {names}" + (f" (driver {driver})" if driver else ""))
    else:
        parts.append("no GPU")
    return "; ".join(parts)


def _simulated_fact(kind: str | None) -> str:
    """What "simulated" means for this target: the cluster simulator computes every
    figure; the synthetic server's latencies are configured."""
    if kind == "cluster_sim":
        return "yes: every figure is the cluster simulator's, none measured"
    return "yes: latencies are configured, not a model's"


def _facts(run: RunData) -> list[tuple[str, str]]:
    m = run.manifest
    spec, target = resolved_spec(run), m.described_target
    facts = [("run", m.run_id), ("suite", m.suite)]
    for label, value in (
        ("spec", spec.get("name")),
        ("description", spec.get("description")),
        ("target kind", target.kind),
        ("target URL", target.url),
        ("model", target.model),
        ("API", target.api),
        ("engine version", target.engine_version),
        ("simulated", _simulated_fact(target.kind) if target.simulated else None),
        ("started", m.anchor_wall_time),
        ("ended", m.ended_wall_time),
        ("moeperf git SHA", m.git_sha),
        ("host", _host_line(m.host or {})),
    ):
        if value not in (None, ""):
            facts.append((label, str(value)))
    # What every request asked of the target: sampling decides throughput.
    facts += request_facts(m)
    return facts


def _condition_line(run: RunData) -> str:
    m, target = run.manifest, run.manifest.described_target
    where = " ".join(v for v in (target.kind, target.url) if v)
    parts = [f"run {m.run_id}", f"target {where or 'unknown'}"]
    if target.model:
        parts.append(f"model {target.model}")
    if target.engine_version:
        parts.append(f"engine {target.engine_version}")
    parts.append(f"status {m.status}")
    return " · ".join(parts)


def _details(run: RunData) -> list[Details]:
    m = run.manifest
    return [
        Details("spec as resolved", pretty_json(m.spec_resolved)),
        Details("spec as given", pretty_json(m.spec_given)),
        Details("target", pretty_json(m.target)),
        Details("host fingerprint", pretty_json(m.host)),
    ]


def run_section(run: RunData) -> Section:
    """The section of one run: its conditions, then the figures of its suite (the suite
    registry names its blocks)."""
    suite = find_suite(run.kind)
    blocks = suite.report_blocks.load()(run) if suite is not None else []
    notes = list(run.manifest.notes)
    if suite is None:
        notes.append(f"No figures for runs of suite {run.kind!r}; its conditions only.")
    return Section(
        title=f"{run.kind} run {run.run_id}",
        anchor=f"run-{run.run_id}",
        facts=_facts(run),
        status=run.manifest.status,
        status_reason=run.manifest.status_reason,
        notes=notes,
        details=_details(run),
        condition_line=_condition_line(run),
        blocks=blocks,
    )


def build_report(runs: list[RunData], title: str, plotlyjs: PlotlyJs = "inline") -> str:
    """The HTML page of ``runs`` (one section each, in the order given); self-contained
    unless ``plotlyjs`` places plotly.js elsewhere (``reports.plotlyjs``)."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    sections = [run_section(run) for run in runs]
    return render_page(
        title,
        sections,
        appendix_html(sections),
        generated=f"Generated by moeperf at {stamp} from {len(runs)} run(s); "
        f"{how_it_opens(plotlyjs)}.",
        plotlyjs=plotlyjs,
    )


def report_command(
    run_refs: list[str],
    runs_dir: str,
    out: str | None = None,
    print_fn: Callable[[str], None] = print,
    *,
    force: bool = False,
    plotlyjs: PlotlyJs = "inline",
) -> int:
    """Write the report of ``run_refs`` (ids, prefixes, directories or "latest") and print
    its path: ``out`` when given, else ``report.html`` in the run's directory (one run) or
    ``report-A-vs-B.html`` in ``runs_dir`` (several). An existing file at the default path
    is refused (exit 2) unless ``force`` (``reports.page_path``)."""
    if not run_refs:
        raise ReportUsageError(
            "name at least one run: an id, a unique prefix, a directory or latest"
        )
    store = RunStore(runs_dir)
    runs = [load_run(store, ref) for ref in run_refs]
    if len(runs) == 1:
        try:
            default = store.open(run_refs[0]).directory / "report.html"
        except CollectorError as exc:
            raise ReportUsageError(str(exc)) from None
    else:
        default = store.root / several_runs_name([run.run_id for run in runs])
    # Checked before the page is built (seconds for a large run), and again by the write.
    target = choose_page_path(default, out, force)
    title = "moeperf report: " + ", ".join(run.run_id for run in runs)
    page = build_report(runs, title, plotlyjs)
    write_page(target.path, page, replace=target.replace)
    beside = place_beside(target.path, plotlyjs)
    print_fn(str(target.path) + (f" (and {beside})" if beside else ""))
    return 0
