"""What the terminal prints of a serving run (``reports.terminal.presentation``).

The answer is what the run's kind asks: the capacity found, the sweep, the interference,
the drill's recovery, the soak's verdicts, the MTP A/B's verdicts; for a plain run, the
curve as a table of its levels, with the workload's own tables (reuse, turns, a trace's
replay, repeats). Each level's full latency table, throughput line and target counters
are detail (``--verbose``). What the target could not give is said once."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from moeperf.collectors.request_audit import audit_text
from moeperf.collectors.serving_records import ScenarioSummary, ServingSummary
from moeperf.collectors.store import RunReader
from moeperf.collectors.target_counters import metrics_unavailable
from moeperf.reports.terminal.curve_table import curve_table
from moeperf.reports.terminal.levels import latency_table, target_counters_line, throughput_line
from moeperf.reports.terminal.presentation import Item, Presentation


def serving_lines(summary: ServingSummary, reader: RunReader) -> Presentation:
    """The answer, detail and unavailable lines of a stored serving run."""
    scenarios = summary.scenarios
    unavailable = metrics_unavailable(reader.server_metrics())
    detail: list[Item] = []
    for scenario, entry in scenarios.items():
        detail += [latency_table(scenario, entry), throughput_line(scenario, entry)]
        if unavailable is None:
            detail.append(target_counters_line(scenario, entry))
    levels = Presentation(
        detail=detail,
        unavailable=[f"target counters: not available ({unavailable})"] if unavailable else [],
    )
    mode = _mode(summary)
    if mode.answer:  # a run of a kind: its own answer; the levels' table is detail
        curve = Presentation(detail=[curve_table(scenarios)])
    else:
        curve = Presentation(answer=[curve_table(scenarios)])
    workload = _workload(summary)
    if summary.telemetry is not None:
        from moeperf.reports.terminal.telemetry_tables import telemetry_lines

        mode += telemetry_lines(summary.telemetry, summary.accelerator_levels())
    estimator = percentiles_line(summary.percentile_estimator, summary.confidence_interval)
    return curve + mode + workload + levels + Presentation(detail=[estimator])


def percentiles_line(estimator: str, interval: str) -> str:
    """How a run's percentiles and their intervals were computed."""
    return f"percentiles: {estimator}; CI: {interval}"


def _workload(summary: ServingSummary) -> Presentation:
    from moeperf.reports.terminal.workload_tables import cache_table, workload_tables

    scenarios = summary.scenarios
    answer: list[Item] = list(workload_tables(scenarios, summary.repeats))
    cache = _cache_state(scenarios)
    if cache.answer is None:
        return Presentation(answer=answer, unavailable=cache.unavailable)
    table = cache_table(scenarios)
    # The per-level cache table answers a workload that reuses prefixes; for any other
    # it only shows that nothing was reused.
    if cache.answer:
        return Presentation(answer=[table, *answer], unavailable=cache.unavailable)
    return Presentation(answer=answer, detail=[table], unavailable=cache.unavailable)


@dataclass(frozen=True)
class _CacheState:
    """Whether the per-level cache table answers the run's question (None: it has
    nothing to show), and what of the cache the target could not give."""

    answer: bool | None
    unavailable: list[str]


def _cache_state(scenarios: Mapping[str, ScenarioSummary]) -> _CacheState:
    from moeperf.collectors.reuse_pairs import reuse_pairs

    entries = list(scenarios.values())
    counted = [
        e for e in entries
        if e.target_counters is not None
        and (e.target_counters.prefix_cache_hit_ratio is not None
             or e.target_counters.prefix_cache_queries == 0)
    ]  # fmt: skip
    # Resets that could not be done are in the run's prefix-cache note (printed with its
    # notes), once for all levels.
    asked = any(e.cache_reset is not None for e in entries)
    unavailable: list[str] = []
    if not counted:
        if asked or any(e.target_counters is not None for e in entries):
            unavailable.append("prefix-cache hit rate: not available from this target")
        return _CacheState(None, unavailable)
    reuses = bool(reuse_pairs(scenarios)) or any(e.turns for e in entries)
    return _CacheState(reuses, unavailable)


def _mode(summary: ServingSummary) -> Presentation:
    # Each part is imported only when the run has it: runs show of a plain run stays light.
    answer: list[Item] = []
    detail: list[Item] = []
    if summary.capacity is not None:
        from moeperf.reports.terminal.capacity_table import capacity_table

        answer.append(capacity_table(summary.capacity))
    if summary.sweep is not None:
        from moeperf.reports.terminal.sweep_table import fit_table, plan_table, sweep_table

        answer.append(sweep_table(summary.sweep, summary.scenarios))
        extras = (fit_table(summary.sweep), plan_table(summary.sweep, summary.scenarios))
        answer += [extra for extra in extras if extra is not None]
    if summary.interference is not None:
        from moeperf.reports.terminal.interference_table import interference_table

        answer.append(interference_table(summary.interference, summary.scenarios))
    if summary.request_audit is not None:
        # An exact audit is detail; one that is not is part of any answer.
        audit = audit_text(summary.request_audit)
        (detail if summary.request_audit.exact else answer).append(audit)
    if summary.drill is not None:
        from moeperf.reports.terminal.drill_tables import drill_table

        answer += [drill_table(summary.drill), audit_text(summary.drill.audit)]
    if summary.soak is not None:
        from moeperf.reports.terminal.soak_tables import verdicts_table, windows_table

        detail.append(windows_table(summary.soak))
        answer.append(verdicts_table(summary.soak))
    if summary.mtp_ab is not None:
        from moeperf.reports.terminal.mtp_ab_tables import mtp_ab_tables

        return Presentation(answer, detail) + mtp_ab_tables(summary.mtp_ab)
    return Presentation(answer, detail)
