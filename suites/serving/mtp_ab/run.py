"""MTP A/B (``[mtp_ab]``): MTP off against k draft tokens, the same seeded workload in
interleaved blocks, per level and decoding mode, with greedy output equality checked
first (suites/serving/mtp_ab/equality.py). The arms and the block order are in arms.py;
the figures in collectors/mtp_ab_summary.py.

Each block is one level of ``load.duration_s`` (its warm-up and cool-down excluded from
its figures) from the same prompts: every block starts at the same place in one pool, so
the arms send the same prompts in the same order. The target's counters are scraped at
each block's start and end (a scraper per arm, nothing in between): its draft and
acceptance counts are the increase over the block, never a lifetime value.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import os
import time
from collections.abc import Callable
from typing import Any

import aiohttp

from moeperf.collectors.mtp_ab_records import MtpAbBlock, MtpAbEquality, MtpAbSummary, arm_name
from moeperf.collectors.store import RunStore, RunWriter
from moeperf.suites.run_options import RunOptions
from moeperf.suites.serving.arm_run import ArmRun, ArmTarget, ArmTelemetry, arm_run, start_ns
from moeperf.suites.serving.level_plan import plan_level
from moeperf.suites.serving.load.auth import RequestHeaders, request_headers
from moeperf.suites.serving.load.pool import WorkerPool
from moeperf.suites.serving.mode_spec import MtpAbSpec
from moeperf.suites.serving.mtp_ab.arms import Arm, prepare, schedule, serving_arms
from moeperf.suites.serving.mtp_ab.equality import arm_outputs, compare
from moeperf.suites.serving.observe.scraper import TargetScraper
from moeperf.suites.serving.preflight import check_target, http_get, served_model
from moeperf.suites.serving.spec import ServingSpec
from moeperf.suites.serving.verdict import Verdict
from moeperf.suites.serving.worker_sizing import worker_count
from moeperf.suites.serving.workload.cache_reset import CacheResetter
from moeperf.suites.serving.workload.prompts import PoolKey, build_prompt_pools
from moeperf.suites.serving.workload.sources import Prompt

_NO_POLLING_S = 1e9  # the arms' scrapers scrape at block edges only


def mode_spec(spec: ServingSpec, ab: MtpAbSpec, mode: str) -> ServingSpec:
    """The spec one mode's requests are sent under: greedy, or the sampled temperature
    (the [sampling] section's top_p, top_k and seed kept)."""
    temperature = 0.0 if mode == "greedy" else ab.sampled_temperature
    sampling = spec.sampling.model_copy(update={"temperature": temperature})
    return spec.model_copy(update={"sampling": sampling})


class _Scrapers:
    """One /metrics scraper per arm, on one event loop, scraping at block edges."""

    def __init__(self, arms: list[Arm], run: RunWriter, headers: RequestHeaders):
        self._loop = asyncio.new_event_loop()
        anchor_ns = run.manifest.anchor_monotonic_ns
        self._session = self._loop.run_until_complete(_session())
        self._by_drafts = {
            arm.drafts: TargetScraper(
                arm.url,
                _NO_POLLING_S,
                run.append_server_metrics,
                self._session,
                clock_ns=lambda: time.monotonic_ns() - anchor_ns,
                headers=headers,
            )
            for arm in arms
        }

    def window(self, drafts: int, scenario: str | None) -> None:
        """Close the arm's current window with a scrape and open ``scenario`` (None: none)."""
        self._loop.run_until_complete(self._by_drafts[drafts].start_window(scenario))

    def close(self) -> None:
        self._loop.run_until_complete(self._session.close())
        self._loop.close()


async def _session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession()


def _prompts(spec: ServingSpec, base_url: str, headers: RequestHeaders) -> list[Prompt]:
    (pool,) = asyncio.run(build_prompt_pools(spec, base_url, headers, (PoolKey(),)))
    return pool


def run_mtp_ab(
    spec: ServingSpec, spec_given: dict[str, Any], store: RunStore, options: RunOptions
) -> str:
    """Every block of ``spec.mtp_ab`` (the module docstring); return the run id."""
    ab = spec.mtp_ab
    assert ab is not None
    headers = request_headers(spec.target, os.environ)
    get = functools.partial(http_get, headers=headers)
    levels = [int(level) for level in spec.load.levels]
    with serving_arms(spec) as (arms, described):
        check = check_target(arms[0].url, get)
        model = served_model(spec.target.model, check, arms[0].url)
        for arm in arms[1:]:
            if arm.hook is None:
                check_target(arm.url, get)  # every arm answers before anything is stored
        prompts = _prompts(spec, "" if spec.target.kind == "reference" else arms[0].url, headers)
        target = {**described, "model": model, "api": spec.target.api}
        blocks: list[MtpAbBlock] = []
        equality: MtpAbEquality | None = None

        def summary() -> MtpAbSummary:
            return MtpAbSummary(
                drafts=tuple(ab.drafts),
                modes=tuple(ab.modes),
                levels=tuple(levels),
                blocks_per_arm=ab.blocks,
                block_s=spec.load.level_limit_s,
                sampled_temperature=ab.sampled_temperature,
                blocks=tuple(blocks),
                equality=equality,
            )

        # Every arm's GPUs are the sampler's (nvml, dcgm); the blocks tell the arms apart.
        with arm_run(
            spec, spec_given, store, options, ArmTarget(target, arms[0].url, model),
            prompts=prompts, headers=headers, summary=summary, note=_note(spec, ab, levels),
            telemetry=ArmTelemetry(no_process=SEVERAL_TARGETS),
            verdict=lambda levels_end: _with_equality(levels_end, equality),
        ) as session:  # fmt: skip
            scrapers = _Scrapers(arms, session.run, headers)
            try:
                if "greedy" in ab.modes and ab.equality_prompts:
                    equality = _equality(spec, ab, arms, model, prompts, headers, get)
                for mode in ab.modes:
                    _run_mode(mode_spec(spec, ab, mode), ab, mode, arms, session, get,
                              blocks, scrapers)  # fmt: skip
            finally:
                scrapers.close()
        return session.run.run_id


SEVERAL_TARGETS = "one target per arm: their processes are not watched (the GPUs are, per block)"


def _equality(
    spec: ServingSpec,
    ab: MtpAbSpec,
    arms: list[Arm],
    model: str,
    prompts: list[Prompt],
    headers: RequestHeaders,
    get: Callable[[str, float], Any],
) -> MtpAbEquality:
    chosen = prompts[: ab.equality_prompts]
    streams = max(int(level) for level in spec.load.levels)
    output_tokens = spec.max_output_tokens
    outputs = {}
    for arm in arms:
        prepare(arm, ab, get)
        outputs[arm.drafts] = asyncio.run(
            arm_outputs(arm.url, spec.target.api, model, chosen, output_tokens, streams, headers)
        )
    return compare(outputs, streams, output_tokens)


def _run_mode(
    spec: ServingSpec,
    ab: MtpAbSpec,
    mode: str,
    arms: list[Arm],
    session: ArmRun,
    get: Callable[[str, float], Any],
    blocks: list[MtpAbBlock],
    scrapers: _Scrapers,
) -> None:
    """Every block of one decoding mode, one worker pool per arm."""
    workers = worker_count(spec)
    by_drafts = {arm.drafts: arm for arm in arms}
    pools: dict[int, WorkerPool] = {}
    try:
        for arm in arms:  # spawned together, then waited for
            pools[arm.drafts] = session.pool(
                arm.url, f"{mode}-k{arm.drafts}-", workers, ready=False
            )
        for pool in pools.values():
            pool.wait_ready()
        levels = [int(level) for level in spec.load.levels]
        # Fresh: the arm's prefix cache emptied before each block, where the target can
        # (every block sends the same prompts: a cached one would favour later blocks).
        resetters = {
            arm.drafts: CacheResetter(arm.url, session.headers)
            for arm in arms
            if spec.workload.cache == "fresh"
        }
        for block in schedule(ab, mode, levels):
            arm = by_drafts[block.drafts]
            prepare(arm, ab, get)
            reset = resetters[arm.drafts].reset() if resetters else None
            scrapers.window(arm.drafts, block.scenario)
            session.window(block.scenario)
            try:
                index, prompts = len(session.outcomes), len(session.prompts)
                plans = plan_level(
                    spec,
                    block.streams,
                    index,
                    workers,
                    start_ns(),
                    prompts,
                    scenario=block.scenario,
                )
                (outcome,) = session.level(pools[arm.drafts], plans)
                session.outcomes[-1] = dataclasses.replace(outcome, cache_reset=reset)
            finally:
                scrapers.window(arm.drafts, None)
                session.window(None)
            blocks.append(block)
    finally:
        for pool in pools.values():
            pool.close()


def _with_equality(levels: Verdict, equality: MtpAbEquality | None) -> Verdict:
    """The levels' verdict, failed when greedy output with MTP differs from MTP off."""
    if equality is None or not equality.mismatches:
        return levels
    first = equality.mismatches[0]
    return Verdict(
        "failed",
        f"greedy output with MTP differs from MTP off for {len(equality.mismatches)} "
        f"prompt/arm pair(s); first: prompt {first.prompt}, {arm_name(first.drafts)}, "
        f"at output {equality.position_unit} {first.position} "
        f"({first.off_token!r} with MTP off, {first.arm_token!r} with it)",
    )


def _note(spec: ServingSpec, ab: MtpAbSpec, levels: list[int]) -> str:
    arms = ", ".join(arm_name(d) for d in ab.drafts)
    where = {
        "reference": "one reference target per arm, started together",
        "url": "one server per arm (mtp_ab.urls)"
        if ab.urls
        else "a hook per arm reconfiguring target.url",
    }[spec.target.kind]
    modes = " and ".join(
        m if m == "greedy" else f"sampled (temperature {ab.sampled_temperature:g})"
        for m in ab.modes
    )
    return (
        f"MTP A/B: arms {arms} ({where}); at {', '.join(f'c={x}' for x in levels)} and "
        f"{modes}, every arm ran {ab.blocks} block(s) of {spec.load.level_limit_s:g} s, "
        "interleaved (A B ..., then reversed), each from the same prompts in the same order; "
        "the target's counters were scraped at each block's start and end. "
        + (
            f"Greedy output equality first: {ab.equality_prompts} prompts to every arm, "
            f"{max(levels)} at a time."
            if "greedy" in ab.modes and ab.equality_prompts
            else "No output-equality check (mode greedy not run, or mtp_ab.equality_prompts = 0)."
        )
    )
