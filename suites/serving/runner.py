"""Runs a serving spec: starts the target if embedded, sweeps the load levels, stores all.

Measuring lives in the workers; this module only plans levels, moves records into the
store and asks collectors for the summary.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pandas as pd

from moeperf.collectors.capacity_records import CapacitySummary
from moeperf.collectors.drill_records import DrillSummary, FaultEvent
from moeperf.collectors.drill_summary import summarize_drill
from moeperf.collectors.request_audit import audit_requests, audit_text
from moeperf.collectors.store import RunStore, RunWriter, interrupts_end_runs
from moeperf.suites.run_options import Progress, RunOptions
from moeperf.suites.serving.capacity.run import search_capacity
from moeperf.suites.serving.elastic.drill import ElasticDrill
from moeperf.suites.serving.elastic.replicas import ReplicaSet
from moeperf.suites.serving.elastic.run import elastic_note, elastic_replicas, elastic_summary
from moeperf.suites.serving.embedded.process import EmbeddedTarget, embedded_target
from moeperf.suites.serving.embedded.reference import embedded_reference, with_reference_defaults
from moeperf.suites.serving.faults.inject import Drill
from moeperf.suites.serving.level_loop import LevelHook, LevelLoop, PlannedLevels
from moeperf.suites.serving.level_plan import LevelOutcome, worker_config
from moeperf.suites.serving.load.auth import (
    NO_HEADERS,
    RequestHeaders,
    request_headers,
    without_header_values,
)
from moeperf.suites.serving.load.engine import LoadEngine
from moeperf.suites.serving.load.plan import WorkerConfig
from moeperf.suites.serving.load.pool import WorkerPool
from moeperf.suites.serving.load.request_settings import request_settings
from moeperf.suites.serving.load.validity import (
    run_verdict,
)
from moeperf.suites.serving.locust_pool import LocustPool
from moeperf.suites.serving.observe.live import LiveObservers
from moeperf.suites.serving.preflight import check_target, http_get, served_model
from moeperf.suites.serving.run_notes import cache_note, pool_note, sweep_note, window_note
from moeperf.suites.serving.run_parts import (
    AuditPart,
    CapacityPart,
    DrillPart,
    ElasticPart,
    RunPart,
    SoakPart,
    SweepPart,
    judged,
)
from moeperf.suites.serving.run_plan import planned_levels, probed_spec, sweep_run
from moeperf.suites.serving.run_summary import ground_truth, write_summary
from moeperf.suites.serving.soak.run import Soak
from moeperf.suites.serving.spec import ServingSpec
from moeperf.suites.serving.sweep_fit import search_fit
from moeperf.suites.serving.telemetry import serving_telemetry
from moeperf.suites.serving.verdict import as_verdict, conclude
from moeperf.suites.serving.worker_sizing import worker_sizing
from moeperf.suites.serving.workload.cache_reset import CacheResetter
from moeperf.suites.serving.workload.prompts import read_spec_trace
from moeperf.suites.telemetry import Telemetry


@dataclass(frozen=True)
class RunningTarget:
    """The target a run drives: its base URL, how the manifest describes it, and, for an
    embedded target, its process (drills kill and pause it; the soak watches its memory)."""

    url: str
    described: dict[str, Any]
    process: EmbeddedTarget | None = None
    replicas: ReplicaSet | None = None  # [elastic]: the replicas behind the router at url


@contextmanager
def running(spec: ServingSpec) -> Iterator[RunningTarget]:
    """The target of ``spec``, started first when it is embedded, stopped after."""
    if spec.elastic is not None:
        with elastic_replicas(spec, spec.elastic) as (replicas, described):
            yield RunningTarget(replicas.url, described, replicas=replicas)
        return
    if spec.target.kind == "url":
        yield RunningTarget(spec.target.url, {"kind": "url", "url": spec.target.url})
        return
    if spec.target.kind == "reference":
        with embedded_reference(spec) as (process, described):
            yield RunningTarget(process.url, described, process)
        return
    config = spec.target.synthetic.to_dict()
    if spec.drill is not None:
        config["drill_control"] = True  # its fault windows: for this run's drill only
    with embedded_target("moeperf.targets.synthetic", config) as process:
        described = {"kind": "synthetic", "url": process.url, "config": config, "simulated": True}
        yield RunningTarget(process.url, described, process)


def run_serving(
    spec: ServingSpec,
    spec_given: dict[str, Any],
    store: RunStore,
    progress: Progress | None = None,
    on_started: Callable[[RunWriter], None] = lambda _run: None,
    *,
    pushgateway_url: str | None = None,
    say: Callable[[str], None] = lambda _line: None,
    warn_only: bool = False,
) -> str:
    """Run every level of ``spec``; return the run id. The run ends complete, failed
    (a level the target failed), invalid (a client-bound level) or aborted
    (suites/serving/load/validity.py has the rule).

    Before anything is stored or sent, the target must answer (suites/serving/preflight.py;
    exit 2 if it does not). ``say`` receives lines for the user (the live metrics URL,
    warnings). ``warn_only`` (``moeperf run --warn-only``) only adds a note that failed or
    invalid levels do not fail the command; the statuses stay what they are.
    """
    progress = progress or Progress()
    spec = with_reference_defaults(spec)
    if spec.interference is not None or spec.mtp_ab is not None or spec.deploy_sweep is not None:
        # Runs of arms (suites/serving/arm_run.py): each kind imported only when run.
        options = RunOptions(on_started, say, pushgateway_url, progress, warn_only)
        if spec.deploy_sweep is not None:
            from moeperf.suites.serving.deploy_sweep.run import run_deploy_sweep

            return run_deploy_sweep(spec, spec_given, store, options)
        if spec.interference is not None:
            from moeperf.suites.serving.interference import run_interference

            return run_interference(spec, spec_given, store, options)
        from moeperf.suites.serving.mtp_ab.run import run_mtp_ab

        return run_mtp_ab(spec, spec_given, store, options)
    # Before a target starts or a byte is sent: an unset variable is an exit 2 here.
    headers = request_headers(spec.target, os.environ)
    # Before a target starts, too: a trace that cannot be read is an exit 2 at once.
    trace = read_spec_trace(spec) if spec.workload.kind == "trace" else None
    with running(spec) as started:
        base_url, target = started.url, started.described
        get = functools.partial(http_get, headers=headers)
        check = check_target(base_url, get)
        if started.replicas is not None:
            # The router lists its model as "unknown" (it asks the replicas a route they do
            # not have): the model is the one the replicas serve.
            check = check_target(started.replicas.replicas[0].url, get)
        model = served_model(spec.target.model, check, base_url)
        source = "spec" if spec.target.model else f"target ({check.checked})"
        target = {**target, "model": model, "model_source": source, "api": spec.target.api}
        target["headers"] = headers.described()  # names and origins, never a value
        probe_notes: tuple[str, ...] = ()
        if spec.target.kind == "url" and spec.target.probe:
            spec, target["probe"], probe_notes = probed_spec(spec, base_url, model, check, headers)
        sweep = sweep_run(spec, check, model)
        levels = planned_levels(spec, base_url, headers, sweep, trace)
        run = store.create(
            "serving",
            spec_given=without_header_values(spec_given),
            spec_resolved=without_header_values(spec.model_dump(mode="json")),
            target=target,
        )
        for note in probe_notes:
            run.add_note(note)
        on_started(run)
        target_name = "synthetic" if spec.target.kind == "synthetic" else model
        observers = LiveObservers(
            spec, run, base_url, target_name, pushgateway_url, say, headers=headers
        )
        telemetry: Telemetry | None = None
        try:
            with run, interrupts_end_runs():
                observers.start()
                drill = _drill(spec, started, run)
                soak = Soak(spec, started.process, run) if spec.soak is not None else None
                if spec.telemetry.enabled:
                    telemetry = serving_telemetry(
                        spec.telemetry, started.process, run, on_sample=observers.device
                    )
                _run_levels(
                    spec,
                    run,
                    base_url,
                    model,
                    levels,
                    progress,
                    observers,
                    warn_only,
                    headers,
                    drill,
                    soak,
                    telemetry,
                )
        finally:
            if telemetry is not None:
                telemetry.finish()  # done already unless the run broke before its levels
            observers.finish(run.manifest.status)
        return run.run_id


def _run_levels(
    spec: ServingSpec,
    run: RunWriter,
    base_url: str,
    model: str,
    levels: PlannedLevels,
    progress: Progress,
    observers: LiveObservers,
    warn_only: bool,
    headers: RequestHeaders = NO_HEADERS,
    drill: Drill | ElasticDrill | None = None,
    soak: Soak | None = None,
    telemetry: Telemetry | None = None,
) -> None:
    sweep = levels.sweep
    run.add_note(window_note(spec, levels.trace))
    prompts = pool_note(spec, (pool.count for pool in levels.pools.values()))
    if prompts:
        run.add_note(prompts)
    if sweep is not None:
        run.add_note(sweep_note(sweep))
    if spec.target.kind == "synthetic":
        run.add_note(
            "Target: the synthetic ground-truth server; its latencies are configured "
            "(simulated), not a model's."
        )
    if spec.elastic is not None:
        run.add_note(elastic_note(spec, run.manifest.target))
    elif spec.target.kind == "reference":
        described = run.manifest.described_target
        run.add_note(
            "Target: the reference engine serving the tiny MoE on this host, started by "
            f"moeperf with {described.threads} torch thread(s) ({described.threads_rule}); "
            "it shares the host's cores with the load workers."
        )
    sizing = worker_sizing(spec)
    if sizing.worth_a_note:
        run.add_note(sizing.note())
    workers = sizing.workers
    config = worker_config(spec, base_url, model, levels.prompts, run, headers)
    # From the config the workers get, after any change to it: what is sent is recorded.
    scrape_interval_s = spec.export.scrape_interval_s if spec.export.scrape_target else None
    run.record_request_settings(request_settings(config, scrape_interval_s))
    pool = _pool(spec, workers, config)
    if drill is not None:
        drill.drop_pools = pool.drop_connections
    # Fresh: the prefix cache is emptied before every level, where the target can.
    resetter = CacheResetter(base_url, headers) if spec.workload.cache == "fresh" else None
    hooks: list[LevelHook] = [hook for hook in (drill, soak, telemetry) if hook is not None]
    loop = LevelLoop(spec, run, pool, levels, progress, observers, hooks, resetter, workers)
    outcomes, sink = loop.outcomes, loop.sink

    capacity: CapacitySummary | None = None
    fits: dict[int, CapacitySummary] = {}
    try:
        if telemetry is not None:
            telemetry.start()
        pool.wait_ready()
        engine_note = pool.note()
        if engine_note is not None:
            run.add_note(engine_note)
        if spec.capacity is None:
            for planned in levels.schedule:
                loop.run_level(
                    planned.level, prompt_pool=levels.pools[planned.key], repeat=planned.repeat
                )
                length = planned.key.input_tokens
                if planned.fit_after and spec.sweep is not None and spec.sweep.fit is not None:
                    assert length is not None
                    single = loop.single_stream_ttft_s(length)
                    fits[length] = search_fit(
                        spec.sweep.fit,
                        length,
                        functools.partial(
                            loop.fit_probe,
                            prompt_pool=levels.probe_pool(spec, length),
                            single_ttft_s=single,
                        ),
                    )
        else:
            capacity = search_capacity(spec, spec.capacity, loop.run_level, run.requests_frame)
    except BaseException:
        pool.drain(sink)
        observers.stop_scraping()
        if telemetry is not None:
            telemetry.finish()
        frame = run.requests_frame()
        parts = _mode_parts(levels, outcomes, fits, None, drill, soak, frame, run)
        write_summary(run, spec, frame, outcomes, None, parts, trace=levels.trace,
                      telemetry=telemetry)  # fmt: skip
        raise
    finally:
        pool.close()
    observers.stop_scraping()
    if telemetry is not None:
        telemetry.finish()
    frame = run.requests_frame()
    truth = None
    if drill is None or not drill.kills:  # a restarted target numbers its answers anew
        truth = ground_truth(spec, base_url, frame)
    parts = _mode_parts(levels, outcomes, fits, capacity, drill, soak, frame, run)
    if pool.merges_records:  # from other processes, maybe hosts: every one accounted for
        sent: dict[int, int] = {}
        for outcome in outcomes:
            for report in outcome.reports:
                sent[report.worker] = sent.get(report.worker, 0) + report.sent
        audit = audit_requests(frame["request_id"], sent)
        run.add_note(audit_text(audit))
        parts.append(AuditPart(audit))
    write_summary(run, spec, frame, outcomes, truth, parts, trace=levels.trace,
                  telemetry=telemetry)  # fmt: skip
    note = cache_note(spec, outcomes)
    if note:
        run.add_note(note)
    for part in parts:
        for text in part.notes():
            run.add_note(text)
    # A fit probe is judged by the target's counters: its level's status is its own.
    levels_verdict = as_verdict(*run_verdict([o.verdict for o in outcomes if not o.fit_probe]))
    conclude(run, judged(levels_verdict, parts), warn_only)


def _mode_parts(
    levels: PlannedLevels,
    outcomes: list[LevelOutcome],
    fits: dict[int, CapacitySummary],
    capacity: CapacitySummary | None,
    drill: Drill | ElasticDrill | None,
    soak: Soak | None,
    frame: pd.DataFrame,
    run: RunWriter,
) -> list[RunPart]:
    """What the run's modes add to its summary, notes and verdict, in the order they
    judge it (a capacity search's verdict replaces the levels')."""
    parts: list[RunPart] = []
    if levels.sweep is not None:
        parts.append(SweepPart(levels.sweep, outcomes, fits))
    if capacity is not None:
        parts.append(CapacityPart(capacity))
    drilled = _drill_summary(drill, outcomes, frame, run)
    if drilled is not None:
        parts.append(DrillPart(drilled))
        if isinstance(drill, ElasticDrill):
            parts.append(ElasticPart(elastic_summary(drill, drilled, frame)))
    soaked = soak.summary(frame) if soak is not None else None
    if soaked is not None:
        parts.append(SoakPart(soaked))
    return parts


def _pool(spec: ServingSpec, workers: int, config: WorkerConfig) -> LoadEngine:
    """The load engine of the spec: asyncio worker processes, or Locust under a master."""
    if spec.load.engine == "asyncio":
        return WorkerPool(workers, config)
    layout = spec.locust
    return LocustPool(
        config,
        workers,
        remote_workers=layout.remote_workers,
        bind=layout.bind,
        port=layout.port,
        connect_timeout_s=layout.connect_timeout_s,
        ui=layout.ui,
        ui_host=layout.ui_host,
        ui_port=layout.ui_port,
    )


def _drill(
    spec: ServingSpec, started: RunningTarget, run: RunWriter
) -> Drill | ElasticDrill | None:
    if spec.drill is None and spec.elastic is None:
        return None
    what = "Drill fault" if spec.drill is not None else "Elastic event"

    def note(event: FaultEvent) -> None:  # stored as it happens: a drill cut short keeps it
        at_s = event.planned_at_s
        caught = "" if event.requests_hit is None else f"; caught {event.requests_hit} requests"
        run.add_note(f"{what} {event.index} ({event.kind} at {at_s:g} s): {event.detail}{caught}")

    anchor_ns = run.manifest.anchor_monotonic_ns
    if spec.elastic is not None:
        assert started.replicas is not None
        return ElasticDrill(spec.elastic, started.replicas, anchor_ns, note)
    assert spec.drill is not None
    return Drill(spec.drill, started.url, started.process, anchor_ns, note)


def _drill_summary(
    drill: Drill | ElasticDrill | None,
    outcomes: list[LevelOutcome],
    frame: pd.DataFrame,
    run: RunWriter,
) -> DrillSummary | None:
    if drill is None or not outcomes or not drill.events:
        return None
    level = outcomes[0]
    sent = {report.worker: report.sent for report in level.reports}
    return summarize_drill(
        frame,
        level.scenario,
        level.start_ns - run.manifest.anchor_monotonic_ns,
        drill.events,
        sent,
        drill.spec.compare_window_s,
    )


def run_suite(
    spec: ServingSpec, spec_given: dict[str, Any], store: RunStore, options: RunOptions
) -> str:
    """``run_serving`` as the suite registry calls every suite's run."""
    return run_serving(
        spec,
        spec_given,
        store,
        options.progress,
        options.on_started,
        pushgateway_url=options.pushgateway_url,
        say=options.say,
        warn_only=options.warn_only,
    )
