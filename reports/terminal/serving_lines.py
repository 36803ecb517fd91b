"""What ``moeperf runs show`` prints of a serving run, after its header: each level's
latency table and throughput line, then the tables of the run's kind (capacity, sweep,
interference, drill, soak, telemetry, MTP A/B) and the workload's."""

from __future__ import annotations

from rich.table import Table

from moeperf.collectors.request_audit import audit_text
from moeperf.collectors.serving_records import ServingSummary
from moeperf.collectors.store import RunReader
from moeperf.collectors.target_counters import metrics_unavailable
from moeperf.reports.terminal.levels import latency_table, target_counters_line, throughput_line


def serving_lines(summary: ServingSummary, reader: RunReader) -> list[Table | str]:
    """The tables and plain lines of a stored serving run, in the order they print."""
    lines: list[Table | str] = []
    unavailable = metrics_unavailable(reader.server_metrics())
    for scenario, entry in summary.scenarios.items():
        lines += [latency_table(scenario, entry), throughput_line(scenario, entry)]
        lines.append(target_counters_line(scenario, entry, unavailable))
    lines += _mode_lines(summary)
    from moeperf.reports.terminal.workload_tables import workload_tables

    scenarios = summary.scenarios.values()
    cache_known = any(e.cache_reset is not None or e.target_counters is not None for e in scenarios)
    lines += workload_tables(summary.scenarios, summary.repeats, cache_known)
    lines.append(percentiles_line(summary.percentile_estimator, summary.confidence_interval))
    return lines


def percentiles_line(estimator: str, interval: str) -> str:
    """How a run's percentiles and their intervals were computed."""
    return f"percentiles: {estimator}; CI: {interval}"


def _mode_lines(summary: ServingSummary) -> list[Table | str]:
    # Each part is imported only when the run has it: runs show of a plain run stays light.
    lines: list[Table | str] = []
    if summary.capacity is not None:
        from moeperf.reports.terminal.capacity_table import capacity_table

        lines.append(capacity_table(summary.capacity))
    if summary.sweep is not None:
        from moeperf.reports.terminal.sweep_table import fit_table, plan_table, sweep_table

        lines.append(sweep_table(summary.sweep, summary.scenarios))
        extras = (fit_table(summary.sweep), plan_table(summary.sweep, summary.scenarios))
        lines += [extra for extra in extras if extra is not None]
    if summary.interference is not None:
        from moeperf.reports.terminal.interference_table import interference_table

        lines.append(interference_table(summary.interference, summary.scenarios))
    if summary.request_audit is not None:
        lines.append(audit_text(summary.request_audit))
    if summary.drill is not None:
        from moeperf.reports.terminal.drill_tables import drill_table

        lines += [drill_table(summary.drill), audit_text(summary.drill.audit)]
    if summary.soak is not None:
        from moeperf.reports.terminal.soak_tables import verdicts_table, windows_table

        lines += [windows_table(summary.soak), verdicts_table(summary.soak)]
    if summary.telemetry is not None:
        from moeperf.reports.terminal.telemetry_tables import telemetry_lines

        lines += telemetry_lines(summary.telemetry, summary.accelerator_levels())
    if summary.mtp_ab is not None:
        from moeperf.reports.terminal.mtp_ab_tables import mtp_ab_tables

        lines += mtp_ab_tables(summary.mtp_ab)
    return lines
