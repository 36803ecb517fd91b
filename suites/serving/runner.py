"""Runs a serving spec: starts the target if embedded, sweeps the load levels, stores all.

Measuring lives in the workers; this module only plans levels, moves records into the
store and asks collectors for the summary.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from collectors.records import RequestRecord
from collectors.serving_records import (
    ServingSummary,
    Slo,
    WorkerSummary,
    empty_scenario,
)
from collectors.store import RunStore, RunWriter, interrupts_end_runs
from collectors.summary import summarize_requests
from collectors.tables import records_frame
from suites.serving.embedded.process import running_target
from suites.serving.embedded.reference import running_reference, with_reference_defaults
from suites.serving.load.arrivals import arrival_offsets_s, split_evenly, split_round_robin
from suites.serving.load.plan import LevelPlan, WorkerConfig
from suites.serving.load.pool import WorkerPool
from suites.serving.load.validity import client_bottlenecks
from suites.serving.observe.ground_truth import (
    fetch_ground_truth,
    measurement_errors,
    summarize_errors,
)
from suites.serving.observe.live import LiveObservers
from suites.serving.workload.prompts import build_prompts
from suites.serving.workload.sources import Prompt
from suites.spec import ServingSpec

# Workers start a level together this long after it is planned (spawn and connect time).
_LEVEL_START_DELAY_S = 0.3
# One worker process per this many streams (or requests/s open loop), up to the cores.
_STREAMS_PER_WORKER = 128
_RATE_PER_WORKER = 100.0


@dataclass
class LevelOutcome:
    scenario: str
    level: float
    reports: list[WorkerSummary]
    invalid_reasons: list[str]


class Progress:
    """What the runner tells its caller as it goes (the CLI draws a progress bar)."""

    def level_started(self, scenario: str, duration_s: float) -> None: ...
    def finished(self, status: str) -> None: ...
    def tick(self) -> None: ...
    def level_done(self, outcome: LevelOutcome) -> None: ...


def scenario_name(mode: str, level: float) -> str:
    return f"c={int(level)}" if mode == "concurrency" else f"rate={level:g}"


def worker_count(spec: ServingSpec) -> int:
    if spec.load.workers != "auto":
        return spec.load.workers
    top = max(spec.load.levels)
    per_worker = _STREAMS_PER_WORKER if spec.load.mode == "concurrency" else _RATE_PER_WORKER
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(cores or 1, math.ceil(top / per_worker)))


def discover_model(base_url: str) -> str | None:
    """The first model the target lists at /v1/models, or None if it cannot say."""
    try:
        with urllib.request.urlopen(base_url.rstrip("/") + "/v1/models", timeout=10) as answer:
            models = json.load(answer).get("data") or []
    except (OSError, ValueError, urllib.error.URLError):
        return None
    return models[0].get("id") if models else None


@contextmanager
def target_url(spec: ServingSpec) -> Iterator[tuple[str, dict[str, Any]]]:
    """The base URL to drive and a description of the target for the manifest."""
    if spec.target.kind == "url":
        yield spec.target.url, {"kind": "url", "url": spec.target.url}
        return
    if spec.target.kind == "reference":
        with running_reference(spec) as (url, described):
            yield url, described
        return
    config = spec.target.synthetic.to_dict()
    with running_target("targets.synthetic", config) as url:
        yield url, {"kind": "synthetic", "url": url, "config": config, "simulated": True}


def plan_level(
    spec: ServingSpec, level: float, index: int, workers: int, start_ns: int, prompts: int
) -> dict[int, LevelPlan]:
    load = spec.load
    scenario = scenario_name(load.mode, level)
    # What every worker's plan shares; each worker's share is filled in below.
    common = LevelPlan(
        scenario=scenario,
        mode=load.mode,
        start_ns=start_ns,
        duration_s=load.duration_s,
        warmup_s=load.warmup_s,
        cooldown_s=load.cooldown_s,
        drain_timeout_s=load.drain_timeout_s,
        concurrency=0,
    )
    if load.mode == "concurrency":
        streams = int(level)
        active = min(workers, streams)
        shares = split_evenly(streams, active)
        budgets = split_evenly(load.max_requests, active) if load.max_requests else [None] * active
        return {
            i: dataclasses.replace(
                common,
                concurrency=shares[i],
                max_requests=budgets[i],
                prompt_offset=(i * prompts) // active,
            )
            for i in range(active)
        }
    offsets = arrival_offsets_s(
        level,
        load.duration_s,
        burstiness=load.burstiness if load.mode == "gamma" else 1.0,
        max_requests=load.max_requests,
        seed=load.seed + index,
    )
    active = max(1, min(workers, len(offsets)))
    caps = split_evenly(load.max_concurrency, active) if load.max_concurrency else [0] * active
    return {
        i: dataclasses.replace(
            common,
            concurrency=caps[i],
            arrivals_s=share,
            prompt_offset=(i * prompts) // active,
        )
        for i, share in enumerate(split_round_robin(offsets, active))
    }


def run_serving(
    spec: ServingSpec,
    spec_given: dict[str, Any],
    store: RunStore,
    progress: Progress | None = None,
    on_started: Callable[[RunWriter], None] = lambda _run: None,
    *,
    pushgateway_url: str | None = None,
    say: Callable[[str], None] = lambda _line: None,
) -> str:
    """Run every level of ``spec``; return the run id. The run is complete, invalid or aborted.

    ``say`` receives lines for the user (the live metrics URL, warnings).
    """
    progress = progress or Progress()
    spec = with_reference_defaults(spec)
    with target_url(spec) as (base_url, target):
        model = spec.target.model or discover_model(base_url) or "default"
        target = {**target, "model": model, "api": spec.target.api}
        prompts = asyncio.run(build_prompts(spec, base_url))
        run = store.create(
            "serving",
            spec_given=spec_given,
            spec_resolved=spec.model_dump(mode="json"),
            target=target,
        )
        on_started(run)
        target_name = "synthetic" if spec.target.kind == "synthetic" else model
        observers = LiveObservers(spec, run, base_url, target_name, pushgateway_url, say)
        try:
            with run, interrupts_end_runs():
                observers.start()
                _run_levels(spec, run, base_url, model, prompts, progress, observers)
        finally:
            observers.finish(run.manifest.status)
        return run.run_id


def _run_levels(
    spec: ServingSpec,
    run: RunWriter,
    base_url: str,
    model: str,
    prompts: list[Prompt],
    progress: Progress,
    observers: LiveObservers,
) -> None:
    load = spec.load
    run.add_note(
        f"Each level ran {load.duration_s:g} s; requests intended in its first "
        f"{load.warmup_s:g} s (warm-up) and last {load.cooldown_s:g} s (cool-down) are "
        "stored but excluded from summaries."
    )
    if spec.target.kind == "synthetic":
        run.add_note(
            "Target: the synthetic ground-truth server; its latencies are configured "
            "(simulated), not a model's."
        )
    if spec.target.kind == "reference":
        run.add_note(
            "Target: the reference engine serving the tiny MoE on this host, started by "
            "moeperf; it shares the host's cores with the load workers."
        )
    workers = worker_count(spec)
    config = WorkerConfig(
        base_url=base_url,
        api=spec.target.api,
        model=model,
        prompts=tuple(prompts),
        anchor_ns=run.manifest.anchor_monotonic_ns,
        request_timeout_s=spec.harness.request_timeout_s,
        stall_timeout_s=spec.harness.stall_timeout_s,
        continuous_usage=spec.target.continuous_usage,
        ignore_eos=spec.target.ignore_eos,
        tokenizer=spec.workload.tokenizer,
        extra_body=dict(spec.target.extra_body),
    )
    pool = WorkerPool(workers, config)
    # By request id: a record amended after its level replaces the first version.
    records: dict[str, RequestRecord] = {}

    def keep(record: RequestRecord) -> None:
        run.append_request(record)
        records[record.request_id] = record
        observers.record(record)

    outcomes: list[LevelOutcome] = []
    try:
        pool.wait_ready()
        for index, level in enumerate(load.levels):
            start_ns = time.monotonic_ns() + int(_LEVEL_START_DELAY_S * 1e9)
            plans = plan_level(spec, level, index, workers, start_ns, len(prompts))
            scenario = scenario_name(load.mode, level)
            progress.level_started(scenario, load.duration_s)
            observers.level_started(scenario, level)
            reports = pool.run_level(
                plans, keep, progress.finished, progress.tick, observers.health
            )
            reasons = client_bottlenecks(
                reports,
                open_loop=load.mode != "concurrency",
                capped=load.max_concurrency > 0,
                max_loop_lag_p99_s=spec.harness.max_loop_lag_p99_s,
                max_cpu_fraction=spec.harness.max_cpu_fraction,
                min_achieved_rate_ratio=spec.harness.min_achieved_rate_ratio,
            )
            outcome = LevelOutcome(scenario, level, reports, reasons)
            outcomes.append(outcome)
            progress.level_done(outcome)
            observers.level_done(scenario, client_bound=bool(reasons))
    except BaseException:
        pool.drain(keep)
        observers.stop_scraping()
        _write_summary(run, spec, list(records.values()), outcomes, None)
        raise
    finally:
        pool.close()
    observers.stop_scraping()
    truth = _ground_truth(spec, base_url, list(records.values()))
    _write_summary(run, spec, list(records.values()), outcomes, truth)
    invalid = [f"{o.scenario}: {r}" for o in outcomes for r in o.invalid_reasons]
    if invalid:
        run.invalidate("client was the bottleneck: " + "; ".join(invalid))


def _ground_truth(
    spec: ServingSpec, base_url: str, records: list[RequestRecord]
) -> dict[str, dict[str, Any]] | None:
    if spec.target.kind != "synthetic":
        return None
    ids = [r.server_request_id for r in records if r.server_request_id]
    return asyncio.run(fetch_ground_truth(base_url, ids))


def _write_summary(
    run: RunWriter,
    spec: ServingSpec,
    records: list[RequestRecord],
    outcomes: list[LevelOutcome],
    truth: dict[str, dict[str, Any]] | None,
) -> None:
    frame = records_frame(records)
    slo = Slo(**spec.slo.model_dump())
    summary = summarize_requests(frame, slo) if len(frame) else ServingSummary()
    scenarios = dict(summary.scenarios)
    for outcome in outcomes:
        harness_error_s = None
        if truth is not None:
            level_frame = frame[
                (frame["scenario"] == outcome.scenario) & (frame["phase"] == "measure")
            ]
            errors = measurement_errors(level_frame, truth, run.manifest.anchor_monotonic_ns)
            ok = int((level_frame["status"] == "ok").sum())
            harness_error_s = summarize_errors(errors, ok)
        scenarios[outcome.scenario] = dataclasses.replace(
            scenarios.get(outcome.scenario) or empty_scenario(slo),
            level=outcome.level,
            harness=tuple(outcome.reports),
            client_bottleneck=tuple(outcome.invalid_reasons),
            harness_error_s=harness_error_s,
        )
    run.write_summary(dataclasses.replace(summary, scenarios=scenarios))
