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
from collections.abc import Generator
from typing import Any

from moeperf.collectors.interference_records import InterferenceArm, InterferenceSummary
from moeperf.collectors.store import RunStore
from moeperf.collectors.target_description import TargetDescription
from moeperf.suites.errors import UsageError
from moeperf.suites.run_options import RunOptions
from moeperf.suites.serving.arm_run import ArmTarget, ArmTelemetry, arm_run, start_ns
from moeperf.suites.serving.embedded.process import EmbeddedTarget
from moeperf.suites.serving.embedded.reference import embedded_reference
from moeperf.suites.serving.load.arrivals import arrival_offsets_s
from moeperf.suites.serving.load.auth import request_headers
from moeperf.suites.serving.load.plan import LevelPlan
from moeperf.suites.serving.mode_spec import InterferenceSpec
from moeperf.suites.serving.preflight import check_target, http_get, served_model
from moeperf.suites.serving.schedule import PromptPool
from moeperf.suites.serving.spec import ServingSpec
from moeperf.suites.serving.workload.prompts import PoolKey, build_prompt_pools
from moeperf.suites.serving.workload.sources import Prompt
from moeperf.suites.workload_spec import LengthSpec

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
        start_ns=start_ns(),
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
    spec: ServingSpec, spec_given: dict[str, Any], store: RunStore, options: RunOptions
) -> str:
    """Every arm of ``spec.interference`` (the module docstring); return the run id."""
    inter = spec.interference
    assert inter is not None
    budget = step_budget(spec)
    prompts, decode_pool, prefill_pool = _prompts(spec, inter)
    headers = request_headers(spec.target, os.environ)
    get = functools.partial(http_get, headers=headers)
    arms: list[InterferenceArm] = []
    targets = _targets(spec, inter.chunked_prefill_sizes, budget)
    try:
        chunk, process, described = next(targets)
        model = served_model(spec.target.model, check_target(process.url, get), process.url)
        target = {**described, "model": model, "api": spec.target.api}
        target["arms"] = {"chunked_prefill_size": list(inter.chunked_prefill_sizes)}

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

        # The process source watches the arm's target: asked at every read, so after a
        # restart the new one (reads while none runs fail, and are counted).
        with arm_run(
            spec, spec_given, store, options, ArmTarget(target, process.url, model),
            prompts=prompts, headers=headers, summary=summary,
            note=_note(inter, budget, TargetDescription.of(described).threads),
            telemetry=ArmTelemetry(pid=lambda: process.pid),
        ) as session:  # fmt: skip
            while True:
                check_target(process.url, get)  # each restarted target answers first
                pool = session.pool(process.url, f"arm{len(arms)}-", workers=2)
                try:
                    arm = _arm(chunk)
                    for mixed, level in ((False, arm.quiet_scenario), (True, arm.mixed_level)):
                        plans = _plans(inter, spec, chunk, mixed, decode_pool, prefill_pool)
                        session.window(level)
                        session.level(pool, plans, open_loop_level=inter.prefill_rate)
                        session.window(None)
                finally:
                    pool.close()
                arms.append(arm)
                try:
                    chunk, process, _ = next(targets)
                except StopIteration:
                    break
        return session.run.run_id
    finally:
        targets.close()


def _arm(chunk: int) -> InterferenceArm:
    return InterferenceArm(
        chunk, f"chunk={chunk} quiet", f"chunk={chunk} decode", f"chunk={chunk} prefill"
    )


def _note(inter: InterferenceSpec, budget: int, threads: int | None) -> str:
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
