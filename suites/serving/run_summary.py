"""A serving run's summary written from its stored requests and its levels' outcomes, with
what its modes add (their parts: suites/serving/run_parts.py) and the accelerator's
figures."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from typing import Any

import pandas as pd

from moeperf.collectors.saturation import level_saturation
from moeperf.collectors.serving_records import (
    ServingSummary,
    Slo,
    empty_scenario,
)
from moeperf.collectors.store import RunWriter
from moeperf.collectors.summary import summarize_requests
from moeperf.collectors.workload_summary import repeat_levels, trace_replay, turn_summaries
from moeperf.suites.serving.level_plan import LevelOutcome
from moeperf.suites.serving.load.validity import (
    error_counts_text,
)
from moeperf.suites.serving.observe.ground_truth import (
    fetch_ground_truth,
    measurement_errors,
    request_errors,
    summarize_errors,
)
from moeperf.suites.serving.observe.level_counters import with_target_counters
from moeperf.suites.serving.run_parts import RunPart
from moeperf.suites.serving.spec import ServingSpec
from moeperf.suites.serving.telemetry import with_figures as with_device_figures
from moeperf.suites.serving.workload.trace import Trace
from moeperf.suites.telemetry import Telemetry

# Open-loop modes whose levels are checked for over-saturation (collectors/saturation.py): a
# closed-loop stream waits for its answer, and a trace's arrivals keep its own bursts.
OPEN_LOOP_RATES = ("poisson", "gamma")


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
    parts: Sequence[RunPart] = (),
    *,
    trace: Trace | None = None,
    telemetry: Telemetry | None = None,
) -> None:
    """The run's summary: each level's requests, what the runner knows of the level, the
    target's counters and the accelerator's figures per level (``telemetry``), then each
    of its modes' ``parts`` in order."""
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
            for error in request_errors(errors) if len(errors) else ():
                run.append_harness_error(error)  # the gate's samples (reports/samples.py)
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
            repeated_prompts_total=outcome.repeated_prompts,
            saturation=(
                level_saturation(level_frame)
                if spec.load.mode in OPEN_LOOP_RATES and len(frame)
                else None
            ),
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
    if telemetry is not None:  # each level's figures over its measured window
        scenarios, telemetry_summary = with_device_figures(telemetry, scenarios, frame)
    summary = dataclasses.replace(
        summary,
        scenarios=scenarios,
        repeats=repeat_levels(scenarios),
        telemetry=telemetry_summary,
    )
    for part in parts:
        summary = part.add_to(summary, frame)
    run.write_summary(summary)
