"""A serving run's summary written from its stored requests and its levels' outcomes, with
what its kind adds (capacity, sweep, interference, MTP A/B, drill, soak, telemetry)."""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass
from typing import Any

import pandas as pd

from moeperf.collectors.capacity_records import CapacitySummary
from moeperf.collectors.drill_records import DrillSummary
from moeperf.collectors.interference_records import InterferenceSummary
from moeperf.collectors.mtp_ab_records import MtpAbSummary
from moeperf.collectors.mtp_ab_summary import with_figures
from moeperf.collectors.request_audit import RequestAudit
from moeperf.collectors.scenario import ScenarioMode
from moeperf.collectors.serving_records import (
    ServingSummary,
    Slo,
    empty_scenario,
)
from moeperf.collectors.soak_records import SoakSummary
from moeperf.collectors.store import RunWriter
from moeperf.collectors.summary import summarize_requests
from moeperf.collectors.sweep_records import SweepPlan, SweepPointSummary, SweepSummary
from moeperf.collectors.workload_summary import repeat_levels, trace_replay, turn_summaries
from moeperf.suites.serving.level_plan import LevelOutcome
from moeperf.suites.serving.load.validity import (
    error_counts_text,
)
from moeperf.suites.serving.observe.ground_truth import (
    fetch_ground_truth,
    measurement_errors,
    summarize_errors,
)
from moeperf.suites.serving.observe.level_counters import with_target_counters
from moeperf.suites.serving.spec import ServingSpec
from moeperf.suites.serving.telemetry import with_figures as with_device_figures
from moeperf.suites.serving.telemetry import with_interference_figures
from moeperf.suites.serving.workload.sweep import (
    ContextLimit,
    SweepPoint,
)
from moeperf.suites.serving.workload.trace import Trace
from moeperf.suites.telemetry import Telemetry


@dataclass(frozen=True, slots=True)
class SweepRun:
    """A sweep's prompt lengths, fit to the target's context limit before anything is sent."""

    points: tuple[SweepPoint, ...]
    limit: ContextLimit
    max_output_tokens: int
    load_mode: ScenarioMode  # how each length's levels are offered (load.mode)
    plan: SweepPlan | None = None  # [plan]: the planner's prediction per length sent


def ground_truth(
    spec: ServingSpec, base_url: str, frame: pd.DataFrame
) -> dict[str, dict[str, Any]] | None:
    if spec.target.kind != "synthetic":
        return None
    ids = [i for i in frame["server_request_id"] if isinstance(i, str) and i]
    return asyncio.run(fetch_ground_truth(base_url, ids))


def write_summary(
    run: RunWriter,
    spec: ServingSpec,
    frame: pd.DataFrame,
    outcomes: list[LevelOutcome],
    truth: dict[str, dict[str, Any]] | None,
    capacity: CapacitySummary | None = None,
    sweep: SweepRun | None = None,
    fits: dict[int, CapacitySummary] | None = None,
    interference: InterferenceSummary | None = None,
    trace: Trace | None = None,
    mtp_ab: MtpAbSummary | None = None,
    drill: DrillSummary | None = None,
    soak: SoakSummary | None = None,
    audit: RequestAudit | None = None,
    telemetry: Telemetry | None = None,
) -> None:
    slo = Slo(**spec.slo.model_dump())
    summary = summarize_requests(frame, slo) if len(frame) else ServingSummary()
    scenarios = dict(summary.scenarios)
    for outcome in outcomes:
        harness_error_s = None
        level_frame = frame[frame["scenario"] == outcome.scenario] if len(frame) else frame
        if truth is not None:
            measured = level_frame[level_frame["phase"] == "measure"]
            errors = measurement_errors(measured, truth, run.manifest.anchor_monotonic_ns)
            ok = int((measured["status"] == "ok").sum())
            harness_error_s = summarize_errors(errors, ok)
        scenarios[outcome.scenario] = dataclasses.replace(
            scenarios.get(outcome.scenario) or empty_scenario(slo),
            level=outcome.level,
            harness=tuple(outcome.reports),
            client_bottleneck=outcome.verdict.client_bottleneck,
            harness_error_s=harness_error_s,
            status=outcome.verdict.status,
            status_reason=outcome.verdict.reason,
            input_tokens=outcome.input_tokens,
            cache_reset_done=outcome.cache_reset.done if outcome.cache_reset else None,
            cache_reset=outcome.cache_reset.detail if outcome.cache_reset else None,
            repeat=outcome.repeat,
            unique=outcome.unique,
            turns=turn_summaries(level_frame) if len(frame) else (),
            trace_replay=(
                trace_replay(level_frame, trace.count, outcome.level)
                if trace is not None and len(frame)
                else None
            ),
        )
    judged = {o.scenario for o in outcomes}
    for name, entry in scenarios.items():
        if name not in judged:  # the level a stop interrupted: its numbers are partial
            reason = "interrupted before the level ended"
            if entry.error_types:
                reason += f" (errors so far: {error_counts_text(entry.error_types)})"
            scenarios[name] = dataclasses.replace(entry, status="invalid", status_reason=reason)
    scenarios = with_target_counters(scenarios, run.directory)  # from the stored scrapes
    telemetry_summary = None
    if telemetry is not None and interference is not None:  # per arm and level
        interference, telemetry_summary = with_interference_figures(
            telemetry, interference, scenarios, frame
        )
    elif telemetry is not None:  # each level's figures over its measured window
        scenarios, telemetry_summary = with_device_figures(telemetry, scenarios, frame)
    swept = _sweep_summary(sweep, outcomes, fits or {}) if sweep is not None else None
    if mtp_ab is not None and len(frame):
        mtp_ab = with_figures(mtp_ab, frame, scenarios)
    run.write_summary(
        dataclasses.replace(
            summary,
            scenarios=scenarios,
            capacity=capacity,
            sweep=swept,
            interference=interference,
            # An A/B run's blocks repeat each arm: its own summary compares them.
            repeats=repeat_levels(scenarios) if mtp_ab is None else (),
            mtp_ab=mtp_ab,
            drill=drill,
            soak=soak,
            request_audit=audit,
            telemetry=telemetry_summary,
        )
    )


def _sweep_summary(
    sweep: SweepRun, outcomes: list[LevelOutcome], fits: dict[int, CapacitySummary]
) -> SweepSummary:
    def scenarios(length: int) -> tuple[str, ...]:
        return tuple(o.scenario for o in outcomes if o.input_tokens == length and not o.fit_probe)

    return SweepSummary(
        context_tokens=sweep.limit.tokens,
        context_source=sweep.limit.source,
        max_output_tokens=sweep.max_output_tokens,
        points=tuple(
            SweepPointSummary(
                p.input_tokens, scenarios(p.input_tokens), p.not_available, fits.get(p.input_tokens)
            )
            for p in sweep.points
        ),
        plan=sweep.plan,
        load_mode=sweep.load_mode,
    )
