"""The report's appendix: metric definitions, taken from the code that computes them.

The module docstrings of ``collectors.latency``, ``collectors.summary`` and
``collectors.quantiles`` are the single source of truth for what TTFT, TPOT, ITL, E2E,
throughput, goodput and the percentiles mean (``collectors.prefill``: a sweep's prefill
rates; ``collectors.workload_summary``: TTFT by turn, a trace's send lag, the spread
between repeats; ``collectors.target_counters``: the target's own counters, the
prefix-cache hit rate; ``collectors.server_latency``: its own latency histograms beside the
client's; ``collectors.saturation``: an open-loop level's signs of over-saturation); the
docstrings of the figure modules say how each chart is drawn
from them. Quoting them here means the report and the code cannot disagree, and the docs'
metric definitions page (moeperf/docs/definitions_page.py) quotes the same modules. Only
the chart kinds a page contains are explained (each ``Chart`` names its figure modules in
``drawn_by``).
Everything is escaped and shown as preformatted text.
"""

from __future__ import annotations

import html
import inspect
from collections.abc import Sequence
from types import ModuleType

from moeperf.collectors import (
    accel_figures,
    deploy_sweep_summary,
    drill_records,
    latency,
    mtp_ab_records,
    quantiles,
    saturation,
    server_latency,
    simulation_summary,
    soak_records,
    soak_verdicts,
    summary,
    target_counters,
    workload_summary,
)
from moeperf.collectors import prefill as prefill_rates
from moeperf.reports.figures import (
    accelerators,
    baseline_trend,
    capacity,
    cdf,
    cluster_sim,
    concurrency,
    deploy_sweep,
    dist_training,
    drill,
    errors,
    expert_load,
    forest,
    interactivity,
    interference,
    memory,
    micro,
    percentiles,
    prefill,
    simulator_check,
    soak,
    steps,
    sweep,
    timeline,
    trace_replay,
    training_events,
    training_throughput,
    turns,
)
from moeperf.reports.render import Chart, Section

DEFINITIONS: tuple[ModuleType, ...] = (
    latency,
    summary,
    quantiles,
    prefill_rates,
    workload_summary,
    target_counters,
    server_latency,
    saturation,
    mtp_ab_records,
    deploy_sweep_summary,
    simulation_summary,
    drill_records,
    soak_records,
    soak_verdicts,
    accel_figures,
)
CHARTS: tuple[ModuleType, ...] = (
    concurrency,
    interactivity,
    capacity,
    percentiles,
    cdf,
    timeline,
    prefill,
    sweep,
    interference,
    deploy_sweep,
    turns,
    trace_replay,
    errors,
    drill,
    soak,
    accelerators,
    forest,
    steps,
    training_throughput,
    training_events,
    memory,
    simulator_check,
    dist_training,
    cluster_sim,
    expert_load,
    micro,
    baseline_trend,
)
# A chart's ``drawn_by`` names: the module's last component ("cdf", "concurrency", ...).
CHART_KINDS: dict[str, ModuleType] = {m.__name__.rsplit(".", 1)[-1]: m for m in CHARTS}


# The chart kinds whose figures each definition module defines: a page quotes a module
# only when it draws one of them (a plain curve's page no longer defines the cluster
# simulator, drills, soaks, MTP A/B and accelerator maths). The serving basics (latency,
# summary, quantiles, and what the workload and the target's counters add) go with every
# serving chart; a page with no chart at all quotes them all.
_SERVING_KINDS = (
    "concurrency", "interactivity", "capacity", "percentiles", "cdf", "timeline", "prefill",
    "sweep", "interference", "deploy_sweep", "turns", "trace_replay", "errors", "drill", "soak",
    "accelerators", "forest", "baseline_trend",
)  # fmt: skip
DEFINED_FOR: dict[ModuleType, tuple[str, ...]] = {
    latency: _SERVING_KINDS,
    summary: _SERVING_KINDS,
    quantiles: _SERVING_KINDS,
    prefill_rates: ("prefill", "sweep"),
    workload_summary: _SERVING_KINDS,
    target_counters: _SERVING_KINDS,
    server_latency: _SERVING_KINDS,
    saturation: _SERVING_KINDS,
    mtp_ab_records: ("forest",),
    deploy_sweep_summary: ("deploy_sweep",),
    simulation_summary: ("cluster_sim", "simulator_check"),
    drill_records: ("drill",),
    soak_records: ("soak",),
    soak_verdicts: ("soak",),
    accel_figures: ("accelerators",),
}


def definitions_for(kinds: tuple[ModuleType, ...]) -> tuple[ModuleType, ...]:
    """The definition modules a page whose charts are of ``kinds`` needs, in
    ``DEFINITIONS`` order; all of them for a page without charts."""
    if not kinds:
        return DEFINITIONS
    names = {m.__name__.rsplit(".", 1)[-1] for m in kinds}
    return tuple(m for m in DEFINITIONS if names & set(DEFINED_FOR[m]))


def docstrings(modules: tuple[ModuleType, ...]) -> list[tuple[str, str]]:
    """(module name, cleaned docstring) of each module that has one; named as the file is
    in the repository (``reports.figures.cdf`` is reports/figures/cdf.py), without the
    ``moeperf.`` every module is imported under."""
    return [
        (m.__name__.removeprefix("moeperf."), inspect.cleandoc(m.__doc__))
        for m in modules
        if m.__doc__
    ]


def _entries(modules: tuple[ModuleType, ...]) -> str:
    return "\n".join(
        f'<h4><code>{html.escape(name)}</code></h4>\n<pre class="doc">{html.escape(text)}</pre>'
        for name, text in docstrings(modules)
    )


def chart_kinds(sections: Sequence[Section]) -> tuple[ModuleType, ...]:
    """The figure modules that drew the charts of ``sections``, in ``CHARTS`` order."""
    named = {
        kind for s in sections for b in s.blocks if isinstance(b, Chart) for kind in b.drawn_by
    }
    unknown = sorted(named - CHART_KINDS.keys())
    if unknown:  # a typo in a drawn_by would silently drop an explanation
        raise ValueError(f"unknown chart kinds {unknown}; known: {sorted(CHART_KINDS)}")
    return tuple(m for name, m in CHART_KINDS.items() if name in named)


def appendix_html(sections: Sequence[Section]) -> str:
    """The appendix section: the metric definitions the page's charts need
    (``definitions_for``), then how those charts are drawn (only the kinds present)."""
    kinds = chart_kinds(sections)
    charts = f"<h3>How the charts are drawn</h3>\n{_entries(kinds)}\n" if kinds else ""
    return (
        '<section class="appendix" id="definitions">\n'
        "<h2>Metric definitions</h2>\n"
        "<p>Quoted from the modules that compute them: what the code does is what is "
        "written here.</p>\n"
        f"{_entries(definitions_for(kinds))}\n"
        f"{charts}"
        "</section>"
    )
