"""The level loop of a serving run: each level planned, run on the load engine, judged and
passed to the level hooks, whichever drives it (the spec's schedule, a capacity search, a
sweep's fit probes).

A level hook watches every level: ``level_started(scenario, start_ns)`` before its workers
start sending, ``level_ended()`` after its last record (a drill injects its faults, a soak
samples the target's memory, the telemetry labels its samples). Its part of the summary
and of the verdict is taken when the run ends (suites/serving/runner.py).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from dataclasses import dataclass, field
from typing import Protocol

from moeperf.collectors.records import RequestRecord
from moeperf.collectors.store import RunWriter
from moeperf.suites.run_options import Progress
from moeperf.suites.serving.capacity.search import Verdict as FitVerdict
from moeperf.suites.serving.level_plan import LevelOutcome, plan_level
from moeperf.suites.serving.load.engine import LevelSink, LoadEngine
from moeperf.suites.serving.load.validity import (
    LevelVerdict,
    MeasuredTally,
    client_bottlenecks,
    judge_level,
)
from moeperf.suites.serving.observe.live import LiveObservers
from moeperf.suites.serving.run_notes import repeats_note
from moeperf.suites.serving.saturation_watch import SaturationWatch, Stopped
from moeperf.suites.serving.schedule import (
    ALL_PROMPTS,
    PROBE_DRAW,
    PlannedLevel,
    PromptPool,
    scenario_name,
)
from moeperf.suites.serving.spec import ServingSpec
from moeperf.suites.serving.spec_tables import LoadSpec
from moeperf.suites.serving.sweep_fit import fit_scenario, fit_verdict, probe_duration_s
from moeperf.suites.serving.workload.cache_reset import CacheResetter
from moeperf.suites.serving.workload.prompts import PoolKey
from moeperf.suites.serving.workload.repeats import prompt_identities, repeated_prompts
from moeperf.suites.serving.workload.sources import Prompt
from moeperf.suites.serving.workload.sweep import SweepRun
from moeperf.suites.serving.workload.trace import Trace


class LevelHook(Protocol):
    """What watches every level of a serving run (the module docstring)."""

    def level_started(self, scenario: str, start_ns: int) -> None: ...
    def level_ended(self) -> None: ...


def probe_key(spec: ServingSpec, input_tokens: int | None) -> PoolKey:
    """The prompt pool of a fit or capacity search's probes: drawn apart from the levels'
    when the cache is reset between levels (a probe must not find them cached)."""
    fresh = spec.workload.cache == "fresh" and spec.capacity is None
    return PoolKey(input_tokens, draw=PROBE_DRAW if fresh else 0)


@dataclass(frozen=True, slots=True)
class PlannedLevels:
    """Everything a run's levels need that is built before the first is sent."""

    prompts: list[Prompt]  # all pools, one after another (the workers get them once)
    pools: dict[PoolKey, PromptPool]  # where each pool lies in ``prompts``
    schedule: list[PlannedLevel]  # empty for a capacity search (it plans as it goes)
    sweep: SweepRun | None
    trace: Trace | None

    def probe_pool(self, spec: ServingSpec, input_tokens: int | None) -> PromptPool:
        """The pool of a fit or capacity search's probes (see ``_probe_key``)."""
        return self.pools[probe_key(spec, input_tokens)]


@dataclass
class LevelLoop:
    """Runs a serving run's levels on one load engine (``run_level``, ``fit_probe``).

    Records go to the run's file and are counted; none is kept here (the summary reads
    them back from the file), so the harness's memory does not grow with the run. With a
    ``[sweep.fit]``, the sweep's load levels keep their TTFTs (a few requests a level):
    each length's fit probes last as long as its prompts take to prefill.
    """

    spec: ServingSpec
    run: RunWriter
    pool: LoadEngine
    levels: PlannedLevels
    progress: Progress
    observers: LiveObservers
    hooks: list[LevelHook]
    resetter: CacheResetter | None
    workers: int
    outcomes: list[LevelOutcome] = field(default_factory=list)
    tally: MeasuredTally = field(default_factory=MeasuredTally)
    ttft_s: dict[str, list[float]] = field(default_factory=dict)  # sweep levels with a fit
    keeps_ttfts: bool = field(init=False)
    # Per pool (start, size): where its next level's prompts start, so that a level never
    # resends what the levels before it sent (until the pool comes round), and the
    # identity of each of its prompts (suites/serving/workload/repeats.py).
    cursors: dict[tuple[int, int], int] = field(default_factory=dict)
    identities: dict[tuple[int, int], tuple[int, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.keeps_ttfts = self.spec.sweep is not None and self.spec.sweep.fit is not None
        # Client-side token counts come after the level: an amendment goes to the file only.
        progress, observers = self.progress, self.observers
        self.sink = LevelSink(
            self.keep, progress.finished, progress.tick, observers.health, self.run.append_request
        )
        spec = self.spec
        self.default_pool = (
            self.levels.probe_pool(spec, None) if spec.capacity is not None else ALL_PROMPTS
        )

    def keep(self, record: RequestRecord) -> None:
        self.run.append_request(record)
        self.tally.add(record)
        self.observers.record(record)
        if self.keeps_ttfts and record.first_token_ns is not None and record.status == "ok":
            self.ttft_s.setdefault(record.scenario, []).append(
                (record.first_token_ns - record.send_ns) / 1e9
            )

    def single_stream_ttft_s(self, input_tokens: int) -> float | None:
        """The TTFT p50 of a sweep length's lowest load level (its repeats pooled): one
        prompt's prefill, alone. None: none of its requests got a token."""
        at = [o for o in self.outcomes if o.input_tokens == input_tokens and not o.fit_probe]
        if not at:
            return None
        lowest = min(o.level for o in at)
        found = [t for o in at if o.level == lowest for t in self.ttft_s.get(o.scenario, [])]
        return float(statistics.median(found)) if found else None

    def run_level(
        self,
        level: float,
        max_requests: int | None = None,
        prompt_pool: PromptPool | None = None,
        fit_probe: bool = False,
        repeat: int | None = None,
        probe_s: float | None = None,
    ) -> LevelOutcome:
        """One level: planned, run, judged, its hooks told; its outcome (also kept)."""
        spec, load, run = self.spec, self.spec.load, self.run
        prompt_pool = prompt_pool or self.default_pool
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
            duration_s = spec.sweep.fit.probe_s if probe_s is None else probe_s
            level_spec = spec.model_copy(update={"load": _fit_load(duration_s, load)})
            scenario = fit_scenario(prompt_pool.input_tokens, level)
        level_load = level_spec.load
        reset = self.resetter.reset() if self.resetter is not None else None
        start_ns = time.monotonic_ns() + int(self.pool.start_delay_s * 1e9)
        size = prompt_pool.count or len(self.levels.prompts)
        where = (prompt_pool.start, size)
        plans = plan_level(level_spec, level, len(self.outcomes), self.workers, start_ns, size,
                           prompt_pool, scenario, self.levels.trace,
                           self.cursors.get(where, 0))  # fmt: skip
        sink, stopped = self.sink, list[Stopped]()
        if level_load.stop_over_saturated and not fit_probe:
            anchor_ns = run.manifest.anchor_monotonic_ns
            sink, stopped = self._watched(SaturationWatch.of(plans, anchor_ns), anchor_ns)
        self.progress.level_started(scenario, next(iter(plans.values())).duration_s)
        self.observers.level_started(scenario, level)
        for hook in self.hooks:
            hook.level_started(scenario, start_ns)
        try:
            reports = self.pool.run_level(plans, sink)
        finally:
            for hook in self.hooks:
                hook.level_ended()
        sent = sum(report.sent for report in reports)
        self.cursors[where] = (self.cursors.get(where, 0) + sent) % size
        if where not in self.identities:
            start = prompt_pool.start
            self.identities[where] = prompt_identities(self.levels.prompts[start : start + size])
        identities = self.identities[where]
        reasons = client_bottlenecks(
            reports,
            open_loop=level_load.mode != "concurrency",
            capped=level_load.max_concurrency > 0,
            max_loop_lag_p99_s=spec.harness.max_loop_lag_p99_s,
            max_cpu_fraction=spec.harness.max_cpu_fraction,
            min_achieved_rate_ratio=spec.harness.min_achieved_rate_ratio,
        )
        counts = self.tally.counts(scenario)
        if stopped:
            run.add_note(stopped[0].text(scenario))
        # Its requests still running at its end were cancelled by design: a fit probe's,
        # and an over-saturated level's stopped early.
        if fit_probe or stopped:
            counts = dataclasses.replace(
                counts, requests=counts.requests - counts.cancelled, cancelled=0
            )
        verdict = judge_level(scenario, counts, reasons)
        if fit_probe and counts.requests == 0 and verdict.status == "failed":
            verdict = LevelVerdict(scenario, "ok")  # none finished within the probe: judged by
            # the target's counters, not by its requests
        outcome = LevelOutcome(scenario, level, reports, verdict, prompt_pool.input_tokens,
                               fit_probe, reset, repeat, prompt_pool.unique, start_ns,
                               repeated_prompts(reports, identities),
                               len(set(identities)))  # fmt: skip
        self.outcomes.append(outcome)
        _note_count_limit(run, level_spec, outcome)
        repeats = repeats_note(spec, outcome)
        if repeats:
            run.add_note(repeats)
        self.progress.level_done(outcome)
        self.observers.level_done(scenario, client_bound=verdict.status == "invalid")
        return outcome

    def _watched(self, watch: SaturationWatch, anchor_ns: int) -> tuple[LevelSink, list[Stopped]]:
        """The run's sink, with every record and tick also checking ``watch``; the level is
        ended once it says stop, and why is put in the list returned."""
        stopped: list[Stopped] = []

        def check() -> None:
            if not stopped and (found := watch.due(time.monotonic_ns() - anchor_ns)) is not None:
                stopped.append(found)
                self.pool.end_level()

        def keep(record: RequestRecord) -> None:
            self.keep(record)
            watch.add(record)
            check()

        def tick() -> None:
            self.progress.tick()
            check()

        return dataclasses.replace(self.sink, on_record=keep, on_tick=tick), stopped

    def fit_probe(
        self, streams: int, prompt_pool: PromptPool, single_ttft_s: float | None = None
    ) -> FitVerdict:
        """A fit probe of ``streams`` (suites/serving/sweep_fit.py): as long as its prompts
        take to prefill (from ``single_ttft_s``, the length's single-stream TTFT p50), and
        judged by the target's counters over the probe."""
        assert self.spec.sweep is not None and self.spec.sweep.fit is not None
        probe_s = probe_duration_s(self.spec.sweep.fit, streams, single_ttft_s)
        outcome = self.run_level(streams, prompt_pool=prompt_pool, fit_probe=True, probe_s=probe_s)
        self.observers.close_level()  # its counters whole now, not at the next level's start
        verdict = outcome.verdict
        not_judged = None if verdict.status == "ok" else f"the level was {verdict.status}"
        if verdict.reason:
            not_judged = f"{not_judged} ({verdict.reason})"
        return fit_verdict(streams, self.observers.level_counters(outcome.scenario), not_judged)


def _fit_load(duration_s: float, load: LoadSpec) -> LoadSpec:
    """A fit probe's level: closed loop for ``duration_s``, every second of it measured,
    and what still runs at its end cancelled at once (the next probe starts from an idle
    target)."""
    return load.model_copy(
        update={
            "mode": "concurrency",
            "duration_s": duration_s,
            "max_requests": None,
            "warmup_s": 0.0,
            "cooldown_s": 0.0,
            "drain_timeout_s": 0.0,
        }
    )


def _note_count_limit(run: RunWriter, spec: ServingSpec, outcome: LevelOutcome) -> None:
    """Say so when a count-bound level stopped at its safety limit before its count."""
    budget = spec.load.max_requests
    sent = sum(r.sent for r in outcome.reports)
    if spec.load.count_bound and budget is not None and sent < budget:
        run.add_note(
            f"{outcome.scenario} stopped at the {spec.load.level_limit_s:g} s safety limit "
            f"after {sent} of its {budget} requests (set load.duration_s to bound it by time)"
        )
