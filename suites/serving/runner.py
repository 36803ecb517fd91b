"""Runs a serving spec: starts the target if embedded, sweeps the load levels, stores all.

Measuring lives in the workers; this module only plans levels, moves records into the
store and asks collectors for the summary.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pandas as pd

from moeperf.collectors.capacity_records import CapacitySummary
from moeperf.collectors.drill_records import DrillSummary, FaultEvent
from moeperf.collectors.drill_summary import summarize_drill
from moeperf.collectors.records import RequestRecord
from moeperf.collectors.request_audit import audit_requests, audit_text
from moeperf.collectors.store import RunStore, RunWriter, interrupts_end_runs
from moeperf.collectors.sweep_records import fit_answer
from moeperf.suites.errors import UsageError
from moeperf.suites.run_options import Progress, RunOptions
from moeperf.suites.serving.capacity.run import capacity_note, capacity_verdict, search_capacity
from moeperf.suites.serving.capacity.search import Verdict as FitVerdict
from moeperf.suites.serving.embedded.process import EmbeddedTarget, embedded_target
from moeperf.suites.serving.embedded.reference import embedded_reference, with_reference_defaults
from moeperf.suites.serving.faults.inject import Drill
from moeperf.suites.serving.faults.verdict import drill_verdict
from moeperf.suites.serving.level_plan import LevelOutcome, plan_level, worker_config, worker_count
from moeperf.suites.serving.load.auth import (
    NO_HEADERS,
    RequestHeaders,
    request_headers,
    without_header_values,
)
from moeperf.suites.serving.load.plan import WorkerConfig
from moeperf.suites.serving.load.pool import WorkerPool
from moeperf.suites.serving.load.request_settings import request_settings
from moeperf.suites.serving.load.validity import (
    LevelVerdict,
    MeasuredTally,
    client_bottlenecks,
    judge_level,
    run_verdict,
)
from moeperf.suites.serving.locust_pool import LocustPool, locust_note
from moeperf.suites.serving.mode_spec import FitSpec
from moeperf.suites.serving.observe.live import LiveObservers
from moeperf.suites.serving.preflight import TargetCheck, check_target, http_get, served_model
from moeperf.suites.serving.probe.adapt import adapt_target
from moeperf.suites.serving.probe.probe import probe_target
from moeperf.suites.serving.run_summary import SweepRun, ground_truth, write_summary
from moeperf.suites.serving.schedule import (
    ALL_PROMPTS,
    PROBE_DRAW,
    PlannedLevel,
    PromptPool,
    level_schedule,
    pool_keys,
    scenario_name,
)
from moeperf.suites.serving.soak.run import Soak, soak_verdict
from moeperf.suites.serving.spec import ServingSpec
from moeperf.suites.serving.spec_tables import LoadSpec
from moeperf.suites.serving.sweep_fit import fit_scenario, fit_verdict, search_fit
from moeperf.suites.serving.sweep_plan import resolve_plan, sweep_plan
from moeperf.suites.serving.telemetry import serving_telemetry
from moeperf.suites.serving.verdict import as_verdict, conclude
from moeperf.suites.serving.workload.cache_reset import CacheResetter
from moeperf.suites.serving.workload.prompts import PoolKey, build_prompt_pools, read_spec_trace
from moeperf.suites.serving.workload.sources import Prompt
from moeperf.suites.serving.workload.sweep import (
    context_limit,
    sweep_points,
)
from moeperf.suites.serving.workload.trace import Trace
from moeperf.suites.telemetry import Telemetry


@dataclass(frozen=True)
class RunningTarget:
    """The target a run drives: its base URL, how the manifest describes it, and, for an
    embedded target, its process (drills kill and pause it; the soak watches its memory)."""

    url: str
    described: dict[str, Any]
    process: EmbeddedTarget | None = None


@contextmanager
def running(spec: ServingSpec) -> Iterator[RunningTarget]:
    """The target of ``spec``, started first when it is embedded, stopped after."""
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
    if spec.interference is not None or spec.mtp_ab is not None:
        # Runs of arms (suites/serving/arm_run.py): each kind imported only when run.
        options = RunOptions(on_started, say, pushgateway_url, progress, warn_only)
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
        check = check_target(base_url, functools.partial(http_get, headers=headers))
        model = served_model(spec.target.model, check, base_url)
        source = "spec" if spec.target.model else f"target ({check.checked})"
        target = {**target, "model": model, "model_source": source, "api": spec.target.api}
        target["headers"] = headers.described()  # names and origins, never a value
        probe_notes: tuple[str, ...] = ()
        if spec.target.kind == "url" and spec.target.probe:
            spec, target["probe"], probe_notes = _probed(spec, base_url, model, check, headers)
        sweep = _sweep(spec, check, model)
        levels = _planned(spec, base_url, headers, sweep, trace)
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


def _sweep(spec: ServingSpec, check: TargetCheck, model: str) -> SweepRun | None:
    if spec.sweep is None:
        return None
    lengths = spec.sweep.input_tokens
    limit = context_limit(lengths, check.context_of(model), check.checked)
    points = sweep_points(lengths, limit, spec.max_output_tokens, spec.target.api)
    if not any(p.sent for p in points):
        raise UsageError(
            f"no prompt length of [sweep] fits the target: {points[0].not_available}; "
            "lower the lengths or the output tokens; nothing was sent and no run was stored"
        )
    predicted = None
    if spec.plan is not None:
        sent = [p.input_tokens for p in points if p.sent]
        predicted = sweep_plan(resolve_plan(spec), sent, spec.max_output_tokens)
    return SweepRun(points, limit, spec.max_output_tokens, predicted)


@dataclass(frozen=True, slots=True)
class _Levels:
    """Everything a run's levels need that is built before the first is sent."""

    prompts: list[Prompt]  # all pools, one after another (the workers get them once)
    pools: dict[PoolKey, PromptPool]  # where each pool lies in ``prompts``
    schedule: list[PlannedLevel]  # empty for a capacity search (it plans as it goes)
    sweep: SweepRun | None
    trace: Trace | None

    def probe_pool(self, spec: ServingSpec, input_tokens: int | None) -> PromptPool:
        """The pool of a fit or capacity search's probes (see ``_probe_key``)."""
        return self.pools[_probe_key(spec, input_tokens)]


def _probe_key(spec: ServingSpec, input_tokens: int | None) -> PoolKey:
    fresh = spec.workload.cache == "fresh" and spec.capacity is None
    return PoolKey(input_tokens, draw=PROBE_DRAW if fresh else 0)


def _planned(
    spec: ServingSpec,
    base_url: str,
    headers: RequestHeaders,
    sweep: SweepRun | None,
    trace: Trace | None = None,
) -> _Levels:
    """The run's schedule and its prompts, one pool per key (suites/serving/schedule.py).

    A capacity search decides its levels as it goes: it draws from one pool, cycled on
    from probe to probe, with the cache reset before each where the target can.
    """
    lengths: list[int | None] = [None]
    if sweep is not None:
        lengths = [p.input_tokens for p in sweep.points if p.sent]
    schedule = [] if spec.capacity is not None else level_schedule(spec, lengths)
    probes: list[int | None] = []
    if spec.capacity is not None:
        probes = [None]
    elif spec.sweep is not None and spec.sweep.fit is not None:
        probes = list(lengths)
    keys = pool_keys(schedule)
    keys += [k for k in (_probe_key(spec, n) for n in probes) if k not in keys]
    built = asyncio.run(build_prompt_pools(spec, base_url, headers, keys))
    prompts: list[Prompt] = []
    pools = {}
    for key, pool in zip(keys, built, strict=True):
        pools[key] = PromptPool(len(prompts), len(pool), key.input_tokens, key.unique)
        prompts += pool
    return _Levels(prompts, pools, schedule, sweep, trace)


def _probed(
    spec: ServingSpec,
    base_url: str,
    model: str,
    check: TargetCheck,
    headers: RequestHeaders,
) -> tuple[ServingSpec, dict[str, Any], tuple[str, ...]]:
    """Probe a url target before anything is stored (suites/serving/probe/): the spec the
    run uses (never sending a field the target refused), the probe's result for the
    manifest, and the notes saying what was changed. A target that does not stream as
    an OpenAI server is refused here (``ProbeFailed``, exit 2)."""
    result = asyncio.run(probe_target(base_url, spec.target.api, model, check.models, headers))
    if spec.workload.tokenizer == "server" and not result.tokenize:
        raise UsageError(
            f"workload.tokenizer = 'server' but the target {base_url} has no /tokenize (the "
            "probe's POST /tokenize got no token ids): set workload.tokenizer to the "
            "directory of the model's tokenizer.json on this machine; nothing was sent at "
            "load and no run was stored"
        )
    adapted = adapt_target(spec.target, result)
    return spec.model_copy(update={"target": adapted.target}), result.to_dict(), adapted.notes


def _run_levels(
    spec: ServingSpec,
    run: RunWriter,
    base_url: str,
    model: str,
    levels: _Levels,
    progress: Progress,
    observers: LiveObservers,
    warn_only: bool,
    headers: RequestHeaders = NO_HEADERS,
    drill: Drill | None = None,
    soak: Soak | None = None,
    telemetry: Telemetry | None = None,
) -> None:
    load = spec.load
    sweep = levels.sweep
    run.add_note(_window_note(spec, levels.trace))
    if sweep is not None:
        run.add_note(_sweep_note(sweep))
    if spec.target.kind == "synthetic":
        run.add_note(
            "Target: the synthetic ground-truth server; its latencies are configured "
            "(simulated), not a model's."
        )
    if spec.target.kind == "reference":
        described = run.manifest.target
        threads = described["config"]["threads"]
        run.add_note(
            "Target: the reference engine serving the tiny MoE on this host, started by "
            f"moeperf with {threads} torch thread(s) ({described['threads_rule']}); it shares "
            "the host's cores with the load workers."
        )
    workers = worker_count(spec)
    config = worker_config(spec, base_url, model, levels.prompts, run, headers)
    # From the config the workers get, after any change to it: what is sent is recorded.
    scrape_interval_s = spec.export.scrape_interval_s if spec.export.scrape_target else None
    run.record_request_settings(request_settings(config, scrape_interval_s))
    pool = _pool(spec, workers, config)
    if drill is not None and isinstance(pool, WorkerPool):
        drill.drop_pools = pool.drop_connections
    # Fresh: the prefix cache is emptied before every level, where the target can.
    resetter = CacheResetter(base_url, headers) if spec.workload.cache == "fresh" else None
    # Records go to the run's file and are counted; none is kept here (the summary reads
    # them back from the file), so the harness's memory does not grow with the run.
    tally = MeasuredTally()

    def keep(record: RequestRecord) -> None:
        run.append_request(record)
        tally.add(record)
        observers.record(record)

    outcomes: list[LevelOutcome] = []
    default_pool = levels.probe_pool(spec, None) if spec.capacity is not None else ALL_PROMPTS

    def run_level(
        level: float,
        max_requests: int | None = None,
        prompt_pool: PromptPool = default_pool,
        fit_probe: bool = False,
        repeat: int | None = None,
    ) -> LevelOutcome:
        # A capacity probe may send more than load.max_requests (its warm-up included).
        level_spec = spec
        if max_requests is not None:
            bounded = spec.load.model_copy(update={"max_requests": max_requests})
            level_spec = spec.model_copy(update={"load": bounded})
        scenario = scenario_name(
            load.mode, level, prompt_pool.input_tokens, prompt_pool.unique, repeat
        )
        if fit_probe:
            assert spec.sweep is not None and spec.sweep.fit is not None
            assert prompt_pool.input_tokens is not None
            level_spec = spec.model_copy(update={"load": _fit_load(spec.sweep.fit, load)})
            scenario = fit_scenario(prompt_pool.input_tokens, level)
        level_load = level_spec.load
        reset = resetter.reset() if resetter is not None else None
        start_ns = time.monotonic_ns() + int(pool.start_delay_s * 1e9)
        size = prompt_pool.count or len(levels.prompts)
        plans = plan_level(
            level_spec,
            level,
            len(outcomes),
            workers,
            start_ns,
            size,
            prompt_pool,
            scenario,
            levels.trace,
        )
        progress.level_started(scenario, next(iter(plans.values())).duration_s)
        observers.level_started(scenario, level)
        if drill is not None:
            drill.start(start_ns)
        if soak is not None:
            soak.start(scenario, start_ns)
        if telemetry is not None:
            telemetry.level_started(scenario)
        try:
            reports = pool.run_level(
                plans,
                keep,
                progress.finished,
                progress.tick,
                observers.health,
                on_amended=run.append_request,  # client-side token counts, after the level
            )
        finally:
            if drill is not None:
                drill.finish()
            if soak is not None:
                soak.finish()
            if telemetry is not None:
                telemetry.level_ended()
        reasons = client_bottlenecks(
            reports,
            open_loop=level_load.mode != "concurrency",
            capped=level_load.max_concurrency > 0,
            max_loop_lag_p99_s=spec.harness.max_loop_lag_p99_s,
            max_cpu_fraction=spec.harness.max_cpu_fraction,
            min_achieved_rate_ratio=spec.harness.min_achieved_rate_ratio,
        )
        counts = tally.counts(scenario)
        if fit_probe:  # its requests still running at its end were cancelled, by design
            counts = dataclasses.replace(
                counts, requests=counts.requests - counts.cancelled, cancelled=0
            )
        verdict = judge_level(scenario, counts, reasons)
        if fit_probe and counts.requests == 0 and verdict.status == "failed":
            verdict = LevelVerdict(scenario, "ok")  # none finished within the probe: judged by
            # the target's counters, not by its requests
        outcome = LevelOutcome(
            scenario,
            level,
            reports,
            verdict,
            prompt_pool.input_tokens,
            fit_probe,
            reset,
            repeat,
            prompt_pool.unique,
            start_ns,
        )
        outcomes.append(outcome)
        _note_count_limit(run, level_spec, outcome)
        progress.level_done(outcome)
        observers.level_done(scenario, client_bound=verdict.status == "invalid")
        return outcome

    def fit_probe(streams: int, prompt_pool: PromptPool) -> FitVerdict:
        outcome = run_level(streams, prompt_pool=prompt_pool, fit_probe=True)
        observers.close_level()  # its counters whole now, not at the next level's start
        verdict = outcome.verdict
        not_judged = None if verdict.status == "ok" else f"the level was {verdict.status}"
        if verdict.reason:
            not_judged = f"{not_judged} ({verdict.reason})"
        return fit_verdict(streams, observers.level_counters(outcome.scenario), not_judged)

    capacity: CapacitySummary | None = None
    fits: dict[int, CapacitySummary] = {}
    try:
        if telemetry is not None:
            telemetry.start()
        pool.wait_ready()
        if isinstance(pool, LocustPool):
            run.add_note(locust_note(pool))
        if spec.capacity is None:
            for planned in levels.schedule:
                run_level(
                    planned.level, prompt_pool=levels.pools[planned.key], repeat=planned.repeat
                )
                length = planned.key.input_tokens
                if planned.fit_after and spec.sweep is not None and spec.sweep.fit is not None:
                    assert length is not None
                    fits[length] = search_fit(
                        spec.sweep.fit,
                        length,
                        functools.partial(fit_probe, prompt_pool=levels.probe_pool(spec, length)),
                    )
        else:
            capacity = search_capacity(spec, spec.capacity, run_level, run.requests_frame)
    except BaseException:
        pool.drain(keep, on_amended=run.append_request)
        observers.stop_scraping()
        if telemetry is not None:
            telemetry.finish()
        frame = run.requests_frame()
        write_summary(
            run,
            spec,
            frame,
            outcomes,
            None,
            sweep=sweep,
            fits=fits,
            trace=levels.trace,
            drill=_drill_summary(drill, outcomes, frame, run),
            soak=soak.summary(frame) if soak is not None else None,
            telemetry=telemetry,
        )
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
    drilled = _drill_summary(drill, outcomes, frame, run)
    soaked = soak.summary(frame) if soak is not None else None
    audit = None
    if isinstance(pool, LocustPool):  # records merged from other processes, maybe hosts
        sent: dict[int, int] = {}
        for outcome in outcomes:
            for report in outcome.reports:
                sent[report.worker] = sent.get(report.worker, 0) + report.sent
        audit = audit_requests(frame["request_id"], sent)
        run.add_note(audit_text(audit))
    write_summary(
        run,
        spec,
        frame,
        outcomes,
        truth,
        capacity,
        sweep,
        fits,
        trace=levels.trace,
        drill=drilled,
        soak=soaked,
        audit=audit,
        telemetry=telemetry,
    )
    note = _cache_note(spec, outcomes)
    if note:
        run.add_note(note)
    for length, fit in fits.items():
        run.add_note(f"Fit at {length} prompt tokens ({fit.criteria}): {fit_answer(fit)}.")
    if capacity is not None:
        # Levels above the capacity may fail (an overloaded target times out): that is
        # what the search measures, not a failure of the run.
        run.add_note(capacity_note(capacity))
        status, reason = capacity_verdict(capacity)
    else:
        # A fit probe is judged by the target's counters: its level's status is its own.
        status, reason = run_verdict([o.verdict for o in outcomes if not o.fit_probe])
    if drilled is not None:
        status, reason = drill_verdict(drilled, status, reason)
    if soaked is not None:
        status, reason = soak_verdict(soaked, status, reason)
    if audit is not None and not audit.exact:
        status, reason = "invalid", audit_text(audit)
    conclude(run, as_verdict(status, reason), warn_only)


def _pool(spec: ServingSpec, workers: int, config: WorkerConfig) -> WorkerPool | LocustPool:
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


def _drill(spec: ServingSpec, started: RunningTarget, run: RunWriter) -> Drill | None:
    if spec.drill is None:
        return None

    def note(event: FaultEvent) -> None:  # stored as it happens: a drill cut short keeps it
        at_s = event.planned_at_s
        run.add_note(f"Drill fault {event.index} ({event.kind} at {at_s:g} s): {event.detail}")

    return Drill(spec.drill, started.url, started.process, run.manifest.anchor_monotonic_ns, note)


def _drill_summary(
    drill: Drill | None,
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


def _cache_note(spec: ServingSpec, outcomes: list[LevelOutcome]) -> str:
    """What the run did about the target's prefix cache, in one sentence."""
    if spec.workload.cache == "reuse":
        return (
            "Prefix cache: workload.cache = 'reuse': every level drew from the same prompts "
            "and nothing was reset, so later levels may be served from the cache."
        )
    resets = [o.cache_reset for o in outcomes if o.cache_reset is not None]
    if not resets:
        return ""
    done = sum(r.done for r in resets)
    if done == len(resets):
        return (
            f"Prefix cache: every level drew its own prompts, and the cache was reset "
            f"before each ({resets[0].detail})."
        )
    failed = next(r.detail for r in resets if not r.done)
    return (
        f"Prefix cache: every level drew its own prompts; a reset before the level "
        f"succeeded {done} of {len(resets)} times ({failed})."
    )


def _window_note(spec: ServingSpec, trace: Trace | None = None) -> str:
    load = spec.load
    if trace is not None:
        return (
            f"Each level replayed the trace {trace.path} ({trace.count} requests over "
            f"{trace.span_s:g} s as recorded, format {trace.format}) open loop, every "
            "request at its recorded time divided by the level (the speed-up), with the "
            "prompt synthesized for it; every request is measured (no warm-up or cool-down)."
        )
    if load.count_bound:
        return (
            f"Each level ran until its {load.max_requests} requests were done (warm-up ones "
            f"included), with a {load.level_limit_s:g} s safety limit; requests intended in "
            f"its first {load.warmup_s:g} s (warm-up) are stored but excluded from summaries; "
            "a level bounded by its count has no cool-down."
        )
    bound = f" or until {load.max_requests} requests were sent" if load.max_requests else ""
    return (
        f"Each level ran {load.level_limit_s:g} s{bound}; requests intended in its first "
        f"{load.warmup_s:g} s (warm-up) and last {load.cooldown_s:g} s (cool-down) are "
        "stored but excluded from summaries."
    )


def _fit_load(fit: FitSpec, load: LoadSpec) -> LoadSpec:
    """A fit probe's level: closed loop for ``probe_s``, every second of it measured, and
    what still runs at its end cancelled at once (the next probe starts from an idle
    target)."""
    return load.model_copy(
        update={
            "mode": "concurrency",
            "duration_s": fit.probe_s,
            "max_requests": None,
            "warmup_s": 0.0,
            "cooldown_s": 0.0,
            "drain_timeout_s": 0.0,
        }
    )


def _sweep_note(sweep: SweepRun) -> str:
    lengths = ", ".join(str(p.input_tokens) for p in sweep.points if p.sent)
    limit = sweep.limit
    known = (
        f"its context limit of {limit.tokens} tokens ({limit.source})"
        if limit.tokens is not None
        else "no context limit (the target states none, the spec gives none)"
    )
    note = (
        f"Sweep over prompt lengths: every load level at {lengths} prompt tokens (each "
        f"with its own prompts), up to {sweep.max_output_tokens} output tokens, checked "
        f"against {known}."
    )
    for point in sweep.points:
        if not point.sent:
            note += f" {point.input_tokens} prompt tokens: {point.not_available}."
    return note


def _note_count_limit(run: RunWriter, spec: ServingSpec, outcome: LevelOutcome) -> None:
    """Say so when a count-bound level stopped at its safety limit before its count."""
    budget = spec.load.max_requests
    sent = sum(r.sent for r in outcome.reports)
    if spec.load.count_bound and budget is not None and sent < budget:
        run.add_note(
            f"{outcome.scenario} stopped at the {spec.load.level_limit_s:g} s safety limit "
            f"after {sent} of its {budget} requests (set load.duration_s to bound it by time)"
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
