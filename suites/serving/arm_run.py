"""A run of arms: differently configured targets of one serving spec, measured in turn in one
stored run. MTP A/B's arms are draft counts served side by side, measured in interleaved
blocks; prefill interference's are chunked-prefill sizes, one target restarted per arm.
Both, and any later kind of arm (a deployment sweep), run through ``arm_run``:

- the run session: the run stored (its spec without header values), its note, the live
  observers (the target's counters not scraped by them: each arm's are its own), the
  accelerator sampler, the records kept as they arrive;
- ``ArmRun.pool``: a worker pool of one arm (its request ids prefixed with the arm), the
  first one's request settings recorded;
- ``ArmRun.level``: one level or block of plans run on a pool, each scenario judged on
  its own workers' reports;
- at the end, the summary (with the arms' own record), written on the normal and the
  abort path alike, and one verdict (``conclude``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from moeperf.collectors.interference_records import InterferenceSummary
from moeperf.collectors.mtp_ab_records import MtpAbSummary
from moeperf.collectors.records import RequestRecord
from moeperf.collectors.store import RunStore, RunWriter, interrupts_end_runs
from moeperf.suites.run_options import Progress, RunOptions
from moeperf.suites.serving.level_plan import LevelOutcome, worker_config
from moeperf.suites.serving.load.auth import RequestHeaders, without_header_values
from moeperf.suites.serving.load.engine import LevelSink
from moeperf.suites.serving.load.plan import LevelPlan
from moeperf.suites.serving.load.pool import WorkerPool
from moeperf.suites.serving.load.request_settings import request_settings
from moeperf.suites.serving.load.validity import judged_level
from moeperf.suites.serving.observe.live import LiveObservers
from moeperf.suites.serving.run_parts import InterferencePart, MtpAbPart, RunPart
from moeperf.suites.serving.run_summary import write_summary
from moeperf.suites.serving.spec import ServingSpec
from moeperf.suites.serving.verdict import Verdict, conclude, levels_verdict
from moeperf.suites.serving.workload.sources import Prompt
from moeperf.suites.telemetry import NOT_STARTED_BY_US, Telemetry

# A run of arms' own summary: interference's and MTP A/B's records, or a part ready-made (a
# deployment sweep's, whose figures need the levels' summaries).
ArmsSummary = InterferenceSummary | MtpAbSummary | RunPart


@dataclass(frozen=True)
class ArmTarget:
    """What the arms' run stores of its targets, and where its observers look."""

    described: dict[str, Any]  # the manifest's target (with the arms)
    base_url: str  # the first arm's: the live observers' target
    model: str


@dataclass(frozen=True)
class ArmTelemetry:
    """How the accelerator sampler watches arms: the running arm's process (asked at every
    read, so a restarted target is followed), or none, and why."""

    pid: Callable[[], int] | None = None
    no_process: str = NOT_STARTED_BY_US


@dataclass
class ArmRun:
    """The session of a run of arms: what each arm's levels need."""

    spec: ServingSpec
    run: RunWriter
    model: str
    prompts: list[Prompt]
    headers: RequestHeaders
    progress: Progress
    observers: LiveObservers
    telemetry: Telemetry | None
    records: dict[str, RequestRecord] = field(default_factory=dict)
    outcomes: list[LevelOutcome] = field(default_factory=list)

    def keep(self, record: RequestRecord) -> None:
        """Store a record as it arrives; an amendment (client-side counts) is not a new
        request to the live observers."""
        self.run.append_request(record)
        if record.request_id not in self.records:
            self.observers.record(record)
        self.records[record.request_id] = record

    def pool(self, url: str, prefix: str, workers: int, *, ready: bool = True) -> WorkerPool:
        """A worker pool sending to one arm's ``url``, its request ids ``prefix``ed; ready
        for a level unless ``ready`` is False (several arms' pools then start at once and
        the caller waits for them)."""
        config = dataclasses.replace(
            worker_config(self.spec, url, self.model, self.prompts, self.run, self.headers),
            request_id_prefix=prefix,
        )
        if self.run.manifest.request_settings is None:
            self.run.record_request_settings(request_settings(config, None))
        pool = WorkerPool(workers, config)
        if ready:
            try:
                pool.wait_ready()
            except BaseException:
                pool.close()
                raise
        return pool

    def level(
        self, pool: WorkerPool, plans: dict[int, LevelPlan], open_loop_level: float = 0.0
    ) -> list[LevelOutcome]:
        """One level on ``pool``: every worker's plan at once, each scenario judged on its
        own workers' reports. A closed-loop scenario's level is its streams; an open-loop
        one's is ``open_loop_level`` (its rate)."""
        label = " + ".join(dict.fromkeys(p.scenario for p in plans.values()))
        self.progress.level_started(label, next(iter(plans.values())).duration_s)
        scenarios: dict[str, list[int]] = {}
        for worker, plan in plans.items():
            scenarios.setdefault(plan.scenario, []).append(worker)
        for scenario, workers in scenarios.items():
            # Its streams (closed loop), or the requests it will send (open loop).
            size = sum(plans[w].concurrency or len(plans[w].arrivals_s) for w in workers)
            self.observers.level_started(scenario, size)
        observers = self.observers
        sink = LevelSink(self.keep, self.progress.finished, self.progress.tick, observers.health)
        reports = pool.run_level(plans, sink)
        outcomes = []
        for scenario, workers in scenarios.items():
            mine = [r for r in reports if r.worker in workers]
            closed = plans[workers[0]].mode == "concurrency"
            verdict = judged_level(
                self.spec.harness, scenario, mine, self.records.values(), open_loop=not closed
            )
            streams = sum(plans[w].concurrency for w in workers)
            outcome = LevelOutcome(scenario, float(streams) if closed else open_loop_level,
                                   mine, verdict)  # fmt: skip
            outcomes.append(outcome)
            self.outcomes.append(outcome)
            self.progress.level_done(outcome)
            observers.level_done(scenario, client_bound=verdict.status == "invalid")
        return outcomes

    def window(self, scenario: str | None) -> None:
        """The sampler's label: the level now running (None: between levels)."""
        if self.telemetry is None:
            return
        if scenario is None:
            self.telemetry.level_ended()
        else:
            self.telemetry.level_started(scenario)


def start_ns() -> int:
    """When a level planned now starts: its workers all start then (the arms' pools are
    the asyncio engine's)."""
    return time.monotonic_ns() + int(WorkerPool.start_delay_s * 1e9)


@contextmanager
def arm_run(
    spec: ServingSpec,
    spec_given: dict[str, Any],
    store: RunStore,
    options: RunOptions,
    target: ArmTarget,
    *,
    prompts: list[Prompt],
    headers: RequestHeaders,
    note: str,
    summary: Callable[[], ArmsSummary],
    telemetry: ArmTelemetry,
    verdict: Callable[[Verdict], Verdict] = lambda levels: levels,
) -> Iterator[ArmRun]:
    """The run of arms as a session (the module docstring): stored, observed and sampled
    while the block runs; summarized and concluded after it, or summarized and aborted
    when it raises. ``verdict`` may overrule the levels' verdict (MTP A/B's output
    equality)."""
    run = store.create(
        "serving",
        spec_given=without_header_values(spec_given),
        spec_resolved=without_header_values(spec.model_dump(mode="json")),
        target=target.described,
    )
    run.add_note(note)
    options.on_started(run)
    # Each arm's counters are its own (and a restarted target's start again): the live
    # observers do not scrape them.
    export = spec.export.model_copy(update={"scrape_target": False})
    observed = spec.model_copy(update={"export": export})
    observers = LiveObservers(
        observed, run, target.base_url, target.model, options.pushgateway_url, options.say
    )
    sampler = None
    if spec.telemetry.enabled:
        sampler = Telemetry(
            spec.telemetry, telemetry.pid, run, observers.device, no_process=telemetry.no_process
        )
    session = ArmRun(
        spec,
        run,
        target.model,
        prompts,
        headers,
        options.progress or Progress(),
        observers,
        sampler,
    )

    def summarize() -> None:
        if sampler is not None:
            sampler.finish()
        arms = summary()
        # Interference's figures are per arm and level (its part computes them); MTP A/B's
        # are each level's.
        part: RunPart
        if isinstance(arms, InterferenceSummary):
            part, level_sampler = InterferencePart(arms, sampler), None
        elif isinstance(arms, MtpAbSummary):
            part, level_sampler = MtpAbPart(arms), sampler
        else:
            part, level_sampler = arms, sampler
        write_summary(run, spec, run.requests_frame(), session.outcomes, None, [part],
                      telemetry=level_sampler)  # fmt: skip

    try:
        with run, interrupts_end_runs():
            observers.start()
            if sampler is not None:
                sampler.start()
            try:
                yield session
            except BaseException:
                summarize()
                raise
            summarize()
            ended = verdict(levels_verdict(session.outcomes))
            conclude(run, ended, options.warn_only)
    finally:
        if sampler is not None:
            sampler.finish()  # done already unless the run broke before its summary
        observers.finish(run.manifest.status)
