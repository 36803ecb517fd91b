"""A deployment sweep's run (``[deploy_sweep]``): every arm, in interleaved order, started,
probed, loaded and stopped.

For each visit of an arm (``arms.interleaved``: A B C, C B A, ...):

0. with ``[plan]``, ask the memory planner whether the arm's deployment fits
   (``plan_check``); one that cannot is planned, not run;
1. start it: the reference target with the arm's knobs over the spec's, timed from launch
   until it answers the pre-flight (its start-up time);
2. probe it: the pre-flight's model list (``check_target``);
3. run ``load.levels`` in order, each from the pool's first prompt (every arm and level
   sends the same prompts in the same order), its prefix cache emptied before each where
   the workload is fresh;
4. stop it, and check it stopped: no process left, its port free.

An arm that does not start, or whose target dies in a level, is recorded with its cause
and the sweep goes on. Ctrl-C ends the run as aborted with the levels measured so far, and
the running arm's target is stopped on the way out. The figures across arms are
``collectors.deploy_sweep_summary``'s.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import os
import time
from collections.abc import Callable, Generator
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

from moeperf.collectors.deploy_sweep_records import DeployArm, DeploySweepSummary
from moeperf.collectors.deploy_sweep_summary import LevelRun
from moeperf.collectors.store import RunStore
from moeperf.suites.errors import TargetError
from moeperf.suites.plan.deploy import DeployConfig
from moeperf.suites.plan.model_config import ModelShape
from moeperf.suites.run_options import RunOptions
from moeperf.suites.serving.arm_run import ArmRun, ArmTarget, ArmTelemetry, arm_run, start_ns
from moeperf.suites.serving.capacity.judge import criteria_text
from moeperf.suites.serving.deploy_sweep.arms import (
    arm_label,
    arm_spec,
    interleaved,
    scenario_of,
    stop_check,
)
from moeperf.suites.serving.deploy_sweep.command import CommandTarget
from moeperf.suites.serving.deploy_sweep.given import GivenServer
from moeperf.suites.serving.deploy_sweep.part import DeploySweepPart
from moeperf.suites.serving.deploy_sweep.plan_check import ArmPlan, check_arm, knob_fields
from moeperf.suites.serving.embedded.process import EmbeddedTarget
from moeperf.suites.serving.embedded.reference import embedded_reference
from moeperf.suites.serving.launched_server import free_port
from moeperf.suites.serving.level_plan import plan_level
from moeperf.suites.serving.load.auth import RequestHeaders, request_headers
from moeperf.suites.serving.mode_spec import DeploySweepSpec, GridValue
from moeperf.suites.serving.preflight import TargetUnreachable, check_target, http_get, served_model
from moeperf.suites.serving.spec import ServingSpec
from moeperf.suites.serving.sweep_plan import resolve_plan
from moeperf.suites.serving.worker_sizing import worker_count
from moeperf.suites.serving.workload.cache_reset import CacheResetter
from moeperf.suites.serving.workload.prompts import PoolKey, build_prompt_pools
from moeperf.suites.serving.workload.sources import Prompt


@dataclass
class _Book:
    """What each arm's starts and stops gave, as they happen."""

    startup_s: dict[int, list[float]] = field(default_factory=dict)
    failures: dict[int, list[str]] = field(default_factory=dict)
    stops: dict[int, list[str]] = field(default_factory=dict)
    # The planner's word per arm, by level with linked knobs ("" without), and the starts
    # it kept from running.
    plans: dict[int, dict[str, ArmPlan]] = field(default_factory=dict)
    not_run: dict[int, list[str]] = field(default_factory=dict)

    def arms(self, arms: list[DeployArm]) -> tuple[DeployArm, ...]:
        return tuple(
            dataclasses.replace(
                arm,
                startup_s=tuple(self.startup_s.get(arm.index, ())),
                failures=tuple(self.failures.get(arm.index, ())),
                stops=tuple(self.stops.get(arm.index, ())),
                plan=tuple(
                    f"{where}: {p.why}" if where else p.why
                    for where, p in self.plans.get(arm.index, {}).items()
                ),
                not_run=tuple(self.not_run.get(arm.index, ())),
            )
            for arm in arms
        )


@dataclass(frozen=True)
class _Planner:
    """[plan]'s model and deployment, and the knobs that set the deployment's fields."""

    shape: ModelShape
    base: DeployConfig
    fields: dict[str, str]

    @classmethod
    def of(cls, spec: ServingSpec, sweep: DeploySweepSpec) -> _Planner | None:
        if spec.plan is None:
            return None
        plan = resolve_plan(spec).plan
        return cls(plan.model, plan.deploy, knob_fields([*sweep.grid, *sweep.linked],
                                                        sweep.plan_fields))  # fmt: skip

    def check(self, knobs: dict[str, GridValue]) -> ArmPlan:
        return check_arm(self.shape, self.base, knobs, self.fields)


@dataclass
class _Visit:
    """An arm's target, started and answering, for one repeat and the levels it runs: all
    of load.levels, or one with linked knobs (set to its streams)."""

    arm: DeployArm
    repeat: int
    levels: tuple[int, ...]
    tag: str  # "#2", or "#2 c=8" with linked knobs: in its start's and stop's records
    target: EmbeddedTarget | CommandTarget | GivenServer
    described: dict[str, Any]
    model: str
    stack: ExitStack


def _start(
    spec: ServingSpec,
    sweep: DeploySweepSpec,
    arm: DeployArm,
    repeat: int,
    levels: tuple[int, ...],
    book: _Book,
    get: Callable[[str, float], Any],
) -> _Visit | None:
    """The arm's target started and probed, or None with the failure in ``book``."""
    stack = ExitStack()
    began = time.monotonic()
    knobs = {**arm.knobs, **{name: levels[0] for name in sweep.linked}}
    # Linked: the start's level and its knobs' value ("#1 c=8, max_num_seqs=8").
    linked = ", ".join(f"{name}={levels[0]}" for name in sweep.linked)
    tag = f"#{repeat}" + (f" c={levels[0]}, {linked}" if sweep.linked else "")
    target: EmbeddedTarget | CommandTarget | GivenServer
    try:
        if sweep.urls:
            target = GivenServer(sweep.urls[arm.index], get)
            check = target.check
            described = {"kind": "url", "url": spec.target.url, "urls": sweep.urls}
        elif sweep.command:
            target = CommandTarget(sweep.command, spec.target.url, knobs, free_port(),
                                   sweep.startup_timeout_s, get)  # fmt: skip
            stack.callback(target.close)
            check = target.check
            # The template as written: a value it reads from the environment is not in it.
            described = {"kind": "url", "url": spec.target.url, "command": sweep.command}
        else:
            target, described = stack.enter_context(
                embedded_reference(arm_spec(spec, knobs), sweep.startup_timeout_s)
            )
            check = check_target(target.url, get)
        model = served_model(spec.target.model, check, target.url)
    except (TargetError, TargetUnreachable) as exc:
        stack.close()
        did = "does not answer" if sweep.urls else "did not start"
        book.failures.setdefault(arm.index, []).append(f"{tag}: {did}: {exc}")
        return None
    except BaseException:  # Ctrl-C while it starts: stopped before the run ends
        stack.close()
        raise
    if not sweep.urls:  # a running server's start was not ours to time
        book.startup_s.setdefault(arm.index, []).append(time.monotonic() - began)
    return _Visit(arm, repeat, levels, tag, target, described, model, stack)


def _said(visit: _Visit | None, arm: DeployArm, arms: int, book: _Book) -> str:
    """One line per visit for the terminal, as it starts (or fails to)."""
    where = f"arm {arm.index + 1}/{arms} {arm.label}"
    if visit is None:
        return f"{where}: {book.failures[arm.index][-1]}"
    running = "running " + ("its level" if len(visit.levels) == 1 else "its levels")
    if isinstance(visit.target, GivenServer):
        return f"{where} ({visit.tag}): {visit.target.url} answering; {running}"
    after_s = book.startup_s[arm.index][-1]
    return f"{where} ({visit.tag}): answering after {after_s:.1f} s; {running}"


def _stop(visit: _Visit, book: _Book) -> None:
    visit.stack.close()
    if isinstance(visit.target, GivenServer):  # not the sweep's to stop
        return
    checked = stop_check(visit.target)
    book.stops.setdefault(visit.arm.index, []).append(f"{visit.tag}: {checked}")


def _planned(
    planner: _Planner | None,
    sweep: DeploySweepSpec,
    arm: DeployArm,
    repeat: int,
    levels: tuple[int, ...],
    book: _Book,
) -> str | None:
    """None: the start may go ahead; else why the planner keeps it from running (also in
    ``book``). The word is the same for every repeat: it is asked once per arm and level."""
    if planner is None:
        return None
    where = f"c={levels[0]}" if sweep.linked else ""
    plans = book.plans.setdefault(arm.index, {})
    if where not in plans:
        plans[where] = planner.check({**arm.knobs, **{n: levels[0] for n in sweep.linked}})
    if plans[where].fits:
        return None
    why = f"#{repeat}{' ' + where if where else ''}: planned, not run: {plans[where].why}"
    book.not_run.setdefault(arm.index, []).append(why)
    return why


def _visits(
    spec: ServingSpec,
    sweep: DeploySweepSpec,
    arms: list[DeployArm],
    book: _Book,
    get: Any,
    say: Callable[[str], None],
) -> Generator[_Visit, None, None]:
    """Each visit whose target started, in interleaved order (failures, and starts the
    planner kept from running, go to ``book``)."""
    levels = tuple(int(level) for level in spec.load.levels)
    planner = _Planner.of(spec, sweep)
    # Linked knobs take each level's streams: one start per level, else one for them all.
    starts = [(level,) for level in levels] if sweep.linked else [levels]
    for index, repeat in interleaved(len(arms), sweep.repeats):
        for start in starts:
            arm = arms[index]
            if not_run := _planned(planner, sweep, arm, repeat, start, book):
                say(f"arm {arm.index + 1}/{len(arms)} {arm.label} {not_run}")
                continue
            visit = _start(spec, sweep, arm, repeat, start, book, get)
            say(_said(visit, arm, len(arms), book))
            if visit is not None:
                yield visit


def _prompts(spec: ServingSpec, headers: RequestHeaders, url: str) -> list[Prompt]:
    """The prompts every arm sends: from the reference target's own tokenizer (a local
    directory), or a url target's tokenizer, its /tokenize included (the first arm's)."""
    base_url = "" if spec.target.kind == "reference" else url
    (pool,) = asyncio.run(build_prompt_pools(spec, base_url, headers, (PoolKey(),)))
    return pool


def run_deploy_sweep(
    spec: ServingSpec, spec_given: dict[str, Any], store: RunStore, options: RunOptions
) -> str:
    """Every visit of every arm of ``spec.deploy_sweep`` (the module docstring); the run id."""
    sweep = spec.deploy_sweep
    assert sweep is not None
    began = time.monotonic()
    headers = request_headers(spec.target, os.environ)
    get = functools.partial(http_get, headers=headers)
    arms = [
        DeployArm(i, arm_label(knobs), knobs, sweep.accelerators_of(knobs))
        for i, knobs in enumerate(sweep.arm_knobs())
    ]
    book = _Book()
    runs: list[LevelRun] = []
    order: list[int] = []
    visits = _visits(spec, sweep, arms, book, get, options.say)
    first = next(visits, None)
    if first is None:
        failed = "; ".join(f"{arms[i].label} {why}" for record in (book.failures, book.not_run)
                           for i, whys in record.items() for why in whys)  # fmt: skip
        raise TargetError(f"no arm of [deploy_sweep] started: {failed}")
    current = first
    visited: set[tuple[int, int]] = set()  # (arm, repeat): one entry of order each
    # The visit whose target runs now: stopped at the end of its levels, or on the way out
    # whatever breaks (the prompts, the run's store or observers, Ctrl-C).
    running: _Visit | None = first
    try:
        prompts = _prompts(spec, headers, first.target.url)
        described = {**first.described, "model": first.model, "api": spec.target.api}
        described["arms"] = {"grid": sweep.grid, "zip": sweep.zip, "repeats": sweep.repeats}
        shell = DeploySweepSummary(
            target_kind=spec.target.kind, slo=criteria_text(sweep), repeats=sweep.repeats,
            order=(), arms=(),
        )  # fmt: skip
        parts: list[DeploySweepPart] = []

        def summary() -> DeploySweepPart:
            done = dataclasses.replace(
                shell, order=tuple(order), arms=book.arms(arms),
                elapsed_s=time.monotonic() - began,
            )  # fmt: skip
            parts.append(DeploySweepPart(done, runs, sweep))
            return parts[-1]

        with arm_run(
            spec, spec_given, store, options,
            ArmTarget(described, first.target.url, first.model),
            prompts=prompts, headers=headers, summary=summary,
            note=_note(spec, sweep, len(arms)),
            telemetry=ArmTelemetry() if sweep.urls else ArmTelemetry(pid=lambda: _pid(current)),
            verdict=lambda levels: parts[-1].judge(levels),
        ) as session:  # fmt: skip
            while running is not None:
                current = running
                if (running.arm.index, running.repeat) not in visited:  # its first start
                    visited.add((running.arm.index, running.repeat))
                    order.append(running.arm.index)
                try:
                    _run_visit(spec, sweep, running, session, runs, book)
                finally:
                    _stop(running, book)
                    running = None
                running = next(visits, None)
        return session.run.run_id
    finally:
        if running is not None:
            _stop(running, book)
        visits.close()


def _run_visit(
    spec: ServingSpec,
    sweep: DeploySweepSpec,
    visit: _Visit,
    session: ArmRun,
    runs: list[LevelRun],
    book: _Book,
) -> None:
    """``load.levels`` on one started arm, in order."""
    arm, url = visit.arm, visit.target.url
    workers = worker_count(spec)
    # Unique per start (the store keys records by id): a linked arm starts once per level.
    prefix = f"arm{arm.index}-r{visit.repeat}-c{visit.levels[0]}-"
    pool = session.pool(url, prefix, workers)
    resetter = CacheResetter(url, session.headers) if spec.workload.cache == "fresh" else None
    try:
        for streams in visit.levels:
            scenario = scenario_of(arm.label, streams, visit.repeat, sweep.repeats)
            reset = resetter.reset() if resetter is not None else None
            session.window(scenario)
            try:
                plans = plan_level(
                    spec, streams, len(session.outcomes), workers, start_ns(),
                    len(session.prompts), scenario=scenario, cursor=0,
                )  # fmt: skip
                (outcome,) = session.level(pool, plans)
                session.outcomes[-1] = dataclasses.replace(outcome, cache_reset=reset)
            finally:
                session.window(None)
            runs.append(LevelRun(arm.index, streams, scenario))
            if not visit.target.alive:
                book.failures.setdefault(arm.index, []).append(
                    f"{visit.tag}: the target died during {streams} streams"
                )
                return
    finally:
        pool.close()


def _pid(visit: _Visit) -> int:
    pid = visit.target.pid
    assert pid is not None  # a target the sweep started
    return pid


def _note(spec: ServingSpec, sweep: DeploySweepSpec, arms: int) -> str:
    levels = ", ".join(str(int(level)) for level in spec.load.levels)
    product = "their i-th values together" if sweep.zip else "every combination"
    if sweep.urls:
        visit = "every visit checks that the arm's server answers, runs"
        after = "; the servers were left running (not the sweep's to stop)"
    else:
        visit = "every visit starts the arm's target (start-up timed until it answers), runs"
        after = ", then stops it and checks that its process and port are gone"
    planned = (
        " Before each start the memory planner checked the arm's deployment ([plan] with "
        "the arm's knobs): an arm it says cannot fit was planned, not run."
        if spec.plan is not None
        else ""
    )
    return (
        f"Deployment sweep: {arms} arm(s) of {_started_how(spec, sweep)} ({product} of "
        f"{', '.join(sweep.grid)}), each run {sweep.repeats} time(s) in interleaved order "
        f"(A B C, C B A ...); {visit} {levels} stream(s) of load.duration_s "
        f"{spec.load.duration_s:g} s each from the same prompts{after}. SLO: "
        f"{criteria_text(sweep)}. The target's counters are not scraped (the arms are "
        f"different servers).{planned}"
    )


def _started_how(spec: ServingSpec, sweep: DeploySweepSpec) -> str:
    if spec.target.kind == "reference":
        return "the reference target"
    if sweep.urls:
        return "servers already running (deploy_sweep.urls)"
    return f"a server started by the command template {sweep.command!r}"
