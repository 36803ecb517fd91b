"""What the terminal prints of a serving run (``reports.terminal.presentation``).

The answer is what the run's kind asks: the capacity found, the sweep, the interference,
the drill's recovery, the soak's verdicts, the MTP A/B's verdicts; for a plain run, the
curve as a table of its levels, with the workload's own tables (reuse, turns, a trace's
replay, repeats). Each level's full latency table, throughput line and target counters
are detail (``--verbose``), with the target's own latencies beside the client's where it
exports them (vLLM), and its KV cache and how the two latencies differ said once; one
answer line where they are far apart. What the target could not give is said once."""

from __future__ import annotations

from collections.abc import Mapping

from moeperf.collectors.request_audit import audit_text
from moeperf.collectors.saturation_records import Saturation
from moeperf.collectors.serving_records import ScenarioSummary, ServingSummary
from moeperf.collectors.store import RunReader
from moeperf.collectors.target_counters import NOT_AVAILABLE, metrics_unavailable
from moeperf.reports.target_text import kv_cache_line
from moeperf.reports.terminal.curve_table import curve_table
from moeperf.reports.terminal.harness_error import harness_error_line
from moeperf.reports.terminal.levels import (
    absent_counters,
    latency_table,
    target_counters_line,
    throughput_line,
)
from moeperf.reports.terminal.presentation import Item, Presentation
from moeperf.reports.terminal.server_latency_table import (
    client_vs_server_line,
    far_apart_line,
    server_latency_table,
)


def serving_lines(summary: ServingSummary, reader: RunReader) -> Presentation:
    """The answer, detail and unavailable lines of a stored serving run."""
    scenarios = summary.scenarios
    unavailable = metrics_unavailable(reader.server_metrics())
    detail: list[Item] = []
    for scenario, entry in scenarios.items():
        detail += [latency_table(scenario, entry), throughput_line(scenario, entry)]
        harness = harness_error_line(scenario, entry)
        if harness is not None:
            detail.append(harness)
        if unavailable is None:
            detail.append(target_counters_line(scenario, entry))
            server = server_latency_table(scenario, entry)  # the target's histograms (vLLM)
            if server is not None:
                detail.append(server)
    # Said once for the run: the target's KV cache, how its latencies differ from ours.
    detail += [line for line in (kv_cache_line(scenarios), client_vs_server_line(scenarios))
               if line is not None]  # fmt: skip
    apart = far_apart_line(scenarios)
    missing = [f"target counters: not available ({unavailable})"] if unavailable else []
    levels = Presentation(
        answer=([apart] if apart is not None else []) + saturation_lines(scenarios),
        detail=detail,
        unavailable=missing + _absent_everywhere(scenarios),
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


def saturation_lines(scenarios: Mapping[str, ScenarioSummary]) -> list[str]:
    """One line per over-saturated open-loop level, with its evidence (collectors/saturation.py)."""
    return [
        f"{name}: over-saturated, its latencies measure a growing queue "
        f"({saturation_evidence(entry.saturation)})"
        for name, entry in scenarios.items()
        if entry.saturation is not None and entry.saturation.over_saturated
    ]


def saturation_evidence(s: Saturation) -> str:
    """The three signs in words."""
    return (
        f"completed {s.completions_per_s:.2f} of {s.arrivals_per_s:.2f} arrivals/s; "
        f"in flight {s.in_flight.per_s:+.2f} ± {s.in_flight.margin:.2f} /s; "
        f"TTFT {s.ttft.per_s * 1e3:+.1f} ± {s.ttft.margin * 1e3:.1f} ms/s"
    )


def _absent_everywhere(scenarios: Mapping[str, ScenarioSummary]) -> list[str]:
    """What the target's counters gave in no level, in one line (each level's own line,
    with what it did give, is detail)."""
    counted = [e.target_counters for e in scenarios.values() if e.target_counters is not None]
    if not counted:
        return []
    everywhere = [what for what in absent_counters(counted[0])
                  if all(what in absent_counters(c) for c in counted[1:])]  # fmt: skip
    if not everywhere:
        return []
    return [f"target counters ({counted[0].dialect}): {', '.join(everywhere)}: {NOT_AVAILABLE}"]


def percentiles_line(estimator: str, interval: str) -> str:
    """How a run's percentiles and their intervals were computed."""
    return f"percentiles: {estimator}; CI: {interval}"


def _workload(summary: ServingSummary) -> Presentation:
    from moeperf.reports.terminal.workload_tables import cache_table, workload_tables

    scenarios = summary.scenarios
    answer: list[Item] = list(workload_tables(scenarios, summary.repeats))
    answers = _cache_answers(scenarios)
    if answers is None:
        return Presentation(answer=answer)
    # The per-level cache table answers a workload that reuses prefixes; for any other
    # it only shows that nothing was reused.
    if answers:
        return Presentation(answer=[cache_table(scenarios), *answer])
    return Presentation(answer=answer, detail=[cache_table(scenarios)])


def _cache_answers(scenarios: Mapping[str, ScenarioSummary]) -> bool | None:
    """Whether the per-level cache table answers the run's question (its workload reuses
    prefixes or conversations); None: it has nothing to show (no level counted)."""
    from moeperf.collectors.reuse_pairs import reuse_pairs

    entries = list(scenarios.values())
    counted = [
        e for e in entries
        if e.target_counters is not None
        and (e.target_counters.prefix_cache_hit_ratio is not None
             or e.target_counters.prefix_cache_queries == 0)
    ]  # fmt: skip
    # What the target could not give is said once with its counters (_absent_everywhere),
    # resets that could not be done in the run's prefix-cache note.
    if not counted:
        return None
    return bool(reuse_pairs(scenarios)) or any(e.turns for e in entries)


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
        # The run's notes say the audit already, and one that is not exact makes the run
        # invalid with it as the reason: detail here (and no answer of its own, so a
        # plain Locust run still answers with its levels' table).
        detail.append(audit_text(summary.request_audit))
    if summary.drill is not None:
        from moeperf.reports.terminal.drill_tables import drill_table

        answer += [drill_table(summary.drill), audit_text(summary.drill.audit)]
    if summary.elastic is not None:
        from moeperf.reports.terminal.elastic_table import elastic_table

        answer.append(elastic_table(summary.elastic))
    if summary.soak is not None:
        from moeperf.reports.terminal.soak_tables import verdicts_table, windows_table

        detail.append(windows_table(summary.soak))
        answer.append(verdicts_table(summary.soak))
    if summary.deploy_sweep is not None:
        from moeperf.reports.terminal.deploy_sweep_tables import deploy_sweep_lines

        return Presentation(answer, detail) + deploy_sweep_lines(summary.deploy_sweep)
    if summary.mtp_ab is not None:
        from moeperf.reports.terminal.mtp_ab_tables import mtp_ab_tables

        return Presentation(answer, detail) + mtp_ab_tables(summary.mtp_ab)
    return Presentation(answer, detail)
