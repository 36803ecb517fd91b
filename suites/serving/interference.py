"""Prefill interference against the chunked-prefill size (``[interference]``): how much a
long prompt arriving slows the requests already decoding, and what chunking its prefill
costs that prompt.

One arm per chunked-prefill size, the reference target restarted with it (every other
knob the same, the step budget ``max_num_batched_tokens`` included: large enough for a
whole long prompt plus a decode step of every stream, so chunking alone differs). In
each arm, two levels of ``duration_s``, every request measured (no warm-up, no
cool-down: a decoding request outlives any short window):

- quiet: ``decode_streams`` closed-loop streams of ``decode_input_tokens``-token prompts
  and ``decode_output_tokens`` outputs (scenario "chunk=N quiet");
- mixed: the same streams ("chunk=N decode") while prompts of ``prefill_input_tokens``
  tokens, one output token each, arrive open loop, Poisson at ``prefill_rate`` per
  second, from a second load worker ("chunk=N prefill").

Interference is the decoders' ITL (``collectors.latency``: one sample per token gap of
each ok request) in mixed against quiet, p50 and p99; its price, the long prompts' TTFT.
A decoding request still running when a level's sending stops finishes (up to
``load.drain_timeout_s``), so its last tokens may come after the last long prompt.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import os
import time
from collections.abc import Callable, Generator
from typing import Any

from moeperf.collectors.interference_records import InterferenceArm, InterferenceSummary
from moeperf.collectors.records import RequestRecord
from moeperf.collectors.store import RunStore, RunWriter, interrupts_end_runs
from moeperf.suites.errors import UsageError
from moeperf.suites.run_options import Progress
from moeperf.suites.serving.embedded.process import EmbeddedTarget
from moeperf.suites.serving.embedded.reference import embedded_reference
from moeperf.suites.serving.level_plan import LevelOutcome, worker_config
from moeperf.suites.serving.load.arrivals import arrival_offsets_s
from moeperf.suites.serving.load.auth import request_headers, without_header_values
from moeperf.suites.serving.load.plan import LevelPlan
from moeperf.suites.serving.load.pool import WorkerPool
from moeperf.suites.serving.load.request_settings import request_settings
from moeperf.suites.serving.load.validity import judged_level, run_verdict
from moeperf.suites.serving.mode_spec import InterferenceSpec
from moeperf.suites.serving.observe.live import LiveObservers
from moeperf.suites.serving.preflight import check_target, http_get, served_model
from moeperf.suites.serving.run_summary import write_summary
from moeperf.suites.serving.schedule import PromptPool
from moeperf.suites.serving.spec import ServingSpec
from moeperf.suites.serving.workload.prompts import PoolKey, build_prompt_pools
from moeperf.suites.serving.workload.sources import Prompt
from moeperf.suites.telemetry import Telemetry
from moeperf.suites.workload_spec import LengthSpec

_START_DELAY_S = 0.3  # workers start a level together this long after it is planned
_DEFAULT_STEP_BUDGET = 512  # targets.serving.engine.api.EngineConfig.max_num_batched_tokens


def step_budget(spec: ServingSpec) -> int:
    """The step budget of every arm: the spec's, or enough for a whole long prompt plus a
    decode step of every stream (a size-0 arm must fit a prompt in one step)."""
    inter = spec.interference
    assert inter is not None
    mtp = int(spec.target.reference.get("mtp_tokens", 0))
    needed = inter.prefill_input_tokens + inter.decode_streams * (1 + mtp)
    given = spec.target.reference.get("max_num_batched_tokens")
    if given is None:
        return max(needed, _DEFAULT_STEP_BUDGET)
    if int(given) < needed:
        raise UsageError(
            f"target.reference.max_num_batched_tokens = {given} cannot hold a whole "
            f"{inter.prefill_input_tokens}-token prompt beside {inter.decode_streams} decoding "
            f"streams (the chunked_prefill_size = 0 arm needs {needed}): raise it or remove it"
        )
    return int(given)


def arm_spec(spec: ServingSpec, chunk: int, budget: int) -> ServingSpec:
    reference = {**spec.target.reference, "chunked_prefill_size": chunk}
    reference["max_num_batched_tokens"] = budget
    target = spec.target.model_copy(update={"reference": reference})
    return spec.model_copy(update={"target": target})


def _with_lengths(spec: ServingSpec, input_tokens: int, output_tokens: int) -> ServingSpec:
    workload = spec.workload.model_copy(
        update={
            "input_tokens": LengthSpec(dist="fixed", mean=input_tokens),
            "output_tokens": LengthSpec(dist="fixed", mean=output_tokens),
        }
    )
    return spec.model_copy(update={"workload": workload})


def _prompts(
    spec: ServingSpec, inter: InterferenceSpec
) -> tuple[list[Prompt], PromptPool, PromptPool]:
    """The decoders' prompts and the long ones, from the model's own tokenizer (before any
    target runs: the reference target's tokenizer is a local directory)."""
    decode_spec = _with_lengths(spec, inter.decode_input_tokens, inter.decode_output_tokens)
    prefill_spec = _with_lengths(spec, inter.prefill_input_tokens, 1)
    headers = request_headers(spec.target, os.environ)
    (decode,) = asyncio.run(build_prompt_pools(decode_spec, "", headers, (PoolKey(),)))
    (prefill,) = asyncio.run(build_prompt_pools(prefill_spec, "", headers, (PoolKey(),)))
    return (
        decode + prefill,
        PromptPool(0, len(decode)),
        PromptPool(len(decode), len(prefill), inter.prefill_input_tokens),
    )


def _plans(
    inter: InterferenceSpec,
    spec: ServingSpec,
    chunk: int,
    mixed: bool,
    decode_pool: PromptPool,
    prefill_pool: PromptPool,
) -> dict[int, LevelPlan]:
    load = spec.load
    common = LevelPlan(
        scenario=f"chunk={chunk} {'decode' if mixed else 'quiet'}",
        mode="concurrency",
        start_ns=time.monotonic_ns() + int(_START_DELAY_S * 1e9),
        duration_s=inter.duration_s,
        warmup_s=0.0,
        cooldown_s=0.0,
        drain_timeout_s=load.drain_timeout_s,
        concurrency=inter.decode_streams,
        prompt_start=decode_pool.start,
        prompt_count=decode_pool.count,
    )
    plans = {0: common}
    if mixed:
        arrivals = arrival_offsets_s(inter.prefill_rate, inter.duration_s, seed=load.seed)
        plans[1] = dataclasses.replace(
            common,
            scenario=f"chunk={chunk} prefill",
            mode="poisson",
            concurrency=0,
            arrivals_s=tuple(arrivals),
            prompt_start=prefill_pool.start,
            prompt_count=prefill_pool.count,
        )
    return plans


def _targets(
    spec: ServingSpec, sizes: list[int], budget: int
) -> Generator[tuple[int, EmbeddedTarget, dict[str, Any]], None, None]:
    """Each arm's target in turn: started, yielded (size, process, description), stopped."""
    for chunk in sizes:
        with embedded_reference(arm_spec(spec, chunk, budget)) as (target, described):
            yield chunk, target, described


def run_interference(
    spec: ServingSpec,
    spec_given: dict[str, Any],
    store: RunStore,
    progress: Progress,
    on_started: Callable[[RunWriter], None],
    pushgateway_url: str | None,
    say: Callable[[str], None],
    warn_only: bool,
) -> str:
    """Every arm of ``spec.interference`` (the module docstring); return the run id."""
    inter = spec.interference
    assert inter is not None
    budget = step_budget(spec)
    prompts, decode_pool, prefill_pool = _prompts(spec, inter)
    headers = request_headers(spec.target, os.environ)
    get = functools.partial(http_get, headers=headers)
    # The target restarts per arm: its counters are not scraped (they would restart too).
    export = spec.export.model_copy(update={"scrape_target": False})
    observed = spec.model_copy(update={"export": export})
    records: dict[str, RequestRecord] = {}
    outcomes: list[LevelOutcome] = []
    arms: list[InterferenceArm] = []
    targets = _targets(spec, inter.chunked_prefill_sizes, budget)
    try:
        chunk, process, described = next(targets)
        base_url = process.url
        model = served_model(spec.target.model, check_target(base_url, get), base_url)
        target = {**described, "model": model, "api": spec.target.api}
        target["arms"] = {"chunked_prefill_size": list(inter.chunked_prefill_sizes)}
        run = store.create(
            "serving",
            spec_given=without_header_values(spec_given),
            spec_resolved=without_header_values(spec.model_dump(mode="json")),
            target=target,
        )
        run.add_note(_note(inter, budget, described["config"]["threads"]))
        on_started(run)
        observers = LiveObservers(observed, run, base_url, model, pushgateway_url, say)
        telemetry = None
        if spec.telemetry.enabled:
            # The process source watches the arm's target: asked at every read, so after a
            # restart the new one (reads while none runs fail, and are counted).
            telemetry = Telemetry(spec.telemetry, lambda: process.pid, run, observers.device)

        def keep(record: RequestRecord) -> None:
            run.append_request(record)
            if record.request_id not in records:  # an amendment (client-side counts) is
                observers.record(record)  # not a new request
            records[record.request_id] = record

        def summary() -> InterferenceSummary:
            return InterferenceSummary(
                decode_streams=inter.decode_streams,
                decode_input_tokens=inter.decode_input_tokens,
                decode_output_tokens=inter.decode_output_tokens,
                prefill_input_tokens=inter.prefill_input_tokens,
                prefill_rate=inter.prefill_rate,
                duration_s=inter.duration_s,
                max_num_batched_tokens=budget,
                arms=tuple(arms),
            )

        try:
            with run, interrupts_end_runs():
                observers.start()
                if telemetry is not None:
                    telemetry.start()
                try:
                    while True:
                        check_target(base_url, get)  # each restarted target answers first
                        config = dataclasses.replace(
                            worker_config(spec, base_url, model, prompts, run, headers),
                            request_id_prefix=f"arm{len(arms)}-",
                        )
                        if not arms:
                            run.record_request_settings(request_settings(config, None))
                        pool = WorkerPool(2, config)
                        try:
                            pool.wait_ready()
                            arm = _arm(chunk)
                            for mixed, level in (
                                (False, arm.quiet_scenario),
                                (True, arm.mixed_level),
                            ):
                                plans = _plans(inter, spec, chunk, mixed, decode_pool, prefill_pool)
                                if telemetry is not None:
                                    telemetry.level_started(level)
                                outcomes.extend(
                                    _level(spec, pool, plans, keep, records, progress, observers)
                                )
                                if telemetry is not None:
                                    telemetry.level_ended()
                        finally:
                            pool.close()
                        arms.append(arm)
                        try:
                            chunk, process, _ = next(targets)
                            base_url = process.url
                        except StopIteration:
                            break
                except BaseException:
                    if telemetry is not None:
                        telemetry.finish()
                    write_summary(run, spec, run.requests_frame(), outcomes, None,
                                  interference=summary(), telemetry=telemetry)  # fmt: skip
                    raise
                if telemetry is not None:
                    telemetry.finish()
                write_summary(
                    run,
                    spec,
                    run.requests_frame(),
                    outcomes,
                    None,
                    interference=summary(),
                    telemetry=telemetry,
                )
                status, reason = run_verdict([o.verdict for o in outcomes])
                if status != "complete" and warn_only:
                    run.add_note(
                        f"--warn-only: the run ended {status}, and the command exits 0 all the same"
                    )
                if status == "failed":
                    run.fail(reason or "")
                elif status == "invalid":
                    run.invalidate(reason or "")
        finally:
            if telemetry is not None:
                telemetry.finish()  # done already unless the summary itself failed
            observers.finish(run.manifest.status)
        return run.run_id
    finally:
        targets.close()


def _arm(chunk: int) -> InterferenceArm:
    return InterferenceArm(
        chunk, f"chunk={chunk} quiet", f"chunk={chunk} decode", f"chunk={chunk} prefill"
    )


def _level(
    spec: ServingSpec,
    pool: WorkerPool,
    plans: dict[int, LevelPlan],
    keep: Callable[[RequestRecord], None],
    records: dict[str, RequestRecord],
    progress: Progress,
    observers: LiveObservers,
) -> list[LevelOutcome]:
    """One level (one or two scenarios, one per worker), each judged on its own."""
    assert spec.interference is not None
    rate = spec.interference.prefill_rate
    # One progress bar per level: the worker pool reports each request's end to it.
    label = " + ".join(p.scenario for p in plans.values())
    progress.level_started(label, next(iter(plans.values())).duration_s)
    for plan in plans.values():
        observers.level_started(plan.scenario, plan.concurrency or len(plan.arrivals_s))
    reports = pool.run_level(plans, keep, progress.finished, progress.tick, observers.health)
    outcomes = []
    for worker, plan in plans.items():
        mine = [r for r in reports if r.worker == worker]
        verdict = judged_level(
            spec.harness,
            plan.scenario,
            mine,
            records.values(),
            open_loop=plan.mode != "concurrency",
        )
        # The level: streams (closed loop), or the long prompts' rate (open loop).
        level = float(plan.concurrency) if plan.mode == "concurrency" else rate
        outcome = LevelOutcome(plan.scenario, level, mine, verdict)
        outcomes.append(outcome)
        progress.level_done(outcome)
        observers.level_done(plan.scenario, client_bound=verdict.status == "invalid")
    return outcomes


def _note(inter: InterferenceSpec, budget: int, threads: int) -> str:
    sizes = ", ".join(str(s) for s in inter.chunked_prefill_sizes)
    return (
        f"Prefill interference: the reference target restarted with chunked_prefill_size "
        f"{sizes} (0: whole prompts), each with a step budget of {budget} tokens and "
        f"{threads} torch thread(s); per arm {inter.duration_s:g} s of {inter.decode_streams} "
        f"decoding streams ({inter.decode_input_tokens}-token prompts, "
        f"{inter.decode_output_tokens} output tokens) alone, then {inter.duration_s:g} s with "
        f"{inter.prefill_input_tokens}-token prompts arriving at {inter.prefill_rate:g}/s "
        "(Poisson); every request measured (no warm-up, no cool-down); the target's "
        "counters are not scraped (it restarts per arm)."
    )
