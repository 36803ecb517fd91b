"""A load level planned: each worker's share of it, what every worker is told once, and what
the level came to (LevelOutcome), for every kind of serving run."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from moeperf.collectors.serving_records import (
    WorkerSummary,
)
from moeperf.collectors.store import RunWriter
from moeperf.suites.serving.load.arrivals import arrival_offsets_s, split_evenly, split_round_robin
from moeperf.suites.serving.load.auth import (
    RequestHeaders,
)
from moeperf.suites.serving.load.plan import LevelPlan, WorkerConfig
from moeperf.suites.serving.load.validity import (
    LevelVerdict,
)
from moeperf.suites.serving.schedule import (
    ALL_PROMPTS,
    PromptPool,
    scenario_name,
)
from moeperf.suites.serving.spec import ServingSpec
from moeperf.suites.serving.workload.cache_reset import CacheReset
from moeperf.suites.serving.workload.sources import Prompt
from moeperf.suites.serving.workload.trace import Trace

# A trace level's window lasts past its last arrival by this much (the send is never late
# for want of a window); requests still running then are drained as at any level's end.
_TRACE_END_MARGIN_S = 1.0


@dataclass(frozen=True)
class LevelOutcome:
    scenario: str
    level: float
    reports: list[WorkerSummary]
    verdict: LevelVerdict
    input_tokens: int | None = None  # a sweep's prompt length
    fit_probe: bool = False  # a probe of [sweep.fit], not a load level of the sweep
    # Before the level: the target's prefix cache reset, or why not (None: not asked).
    cache_reset: CacheReset | None = None
    repeat: int | None = None  # 1-based, with load.repeats > 1
    unique: bool = False  # the no-reuse control of a prefix workload
    start_ns: int = 0  # when its workers started sending (time.monotonic_ns)
    # Its requests whose prompt another of its requests had sent already (None: not
    # counted, a trace level's requests bring their own), and the distinct prompts of
    # the pool it drew from.
    repeated_prompts: int | None = None
    pool_prompts: int = 0

    @property
    def sent(self) -> int:
        """The requests its workers sent."""
        return sum(report.sent for report in self.reports)

    @property
    def invalid_reasons(self) -> tuple[str, ...]:
        """Why the client may have set this level's numbers (empty: it did not)."""
        return self.verdict.client_bottleneck


def plan_level(
    spec: ServingSpec,
    level: float,
    index: int,
    workers: int,
    start_ns: int,
    prompts: int,
    pool: PromptPool = ALL_PROMPTS,
    scenario: str | None = None,
    trace: Trace | None = None,
    cursor: int | None = None,
) -> dict[int, LevelPlan]:
    """Each worker's share of one level; ``prompts`` is the size of ``pool``. A trace
    level (``load.mode = "trace"``, ``trace`` given) sends request i of the trace, with
    prompt i of the pool, at its recorded time divided by the level (the speed-up).

    Each worker takes its own part of the pool: as many prompts as it has requests to
    send where that is known (a request budget, an arrival schedule), else an even part.
    With ``cursor`` the level's prompts start there in the pool (the caller keeps the
    place from level to level); without, each worker goes on from where its last level of
    the pool stopped (``LevelPlan.resume_prompts``)."""
    load = spec.load
    scenario = scenario or scenario_name(load.mode, level, pool.input_tokens)
    duration_s = load.level_limit_s
    if trace is not None:
        duration_s = min(duration_s, trace.span_s / level + _TRACE_END_MARGIN_S)
    # What every worker's plan shares; each worker's share is filled in below.
    common = LevelPlan(
        scenario=scenario,
        mode="poisson" if load.mode == "trace" else load.mode,
        start_ns=start_ns,
        duration_s=duration_s,
        warmup_s=load.warmup_s,
        cooldown_s=load.cooldown_s,
        drain_timeout_s=load.drain_timeout_s,
        concurrency=0,
        prompt_start=pool.start,
        prompt_count=pool.count,
    )
    if cursor is not None:
        common = dataclasses.replace(common, resume_prompts=False)
    if load.mode == "concurrency":
        streams = int(level)
        active = min(workers, streams)
        shares = split_evenly(streams, active)
        budgets = split_evenly(load.max_requests, active) if load.max_requests else None
        starts = _prompt_starts(active, budgets, prompts, cursor)
        firsts = _first_sends_s(shares, load.ramp_s)
        return {
            i: dataclasses.replace(
                common,
                concurrency=shares[i],
                max_requests=budgets[i] if budgets else None,
                prompt_offset=starts[i],
                first_sends_s=firsts[i],
            )
            for i in range(active)
        }
    if trace is not None:
        offsets = np.array([r.timestamp_s for r in trace.requests]) / level
        if load.max_requests:
            offsets = offsets[: load.max_requests]
    else:
        offsets = arrival_offsets_s(
            level,
            load.level_limit_s,
            burstiness=load.burstiness if load.mode == "gamma" else 1.0,
            max_requests=load.max_requests,
            seed=load.seed + index,
        )
    active = max(1, min(workers, len(offsets)))
    caps = split_evenly(load.max_concurrency, active) if load.max_concurrency else [0] * active
    end = pool.start + len(offsets)
    arrivals = split_round_robin(offsets, active)
    starts = _prompt_starts(active, [len(share) for share in arrivals], prompts, cursor)
    return {
        i: dataclasses.replace(
            common,
            concurrency=caps[i],
            arrivals_s=share,
            prompt_offset=starts[i],
            # A trace's request k has its own prompt (its length, its shared blocks): k.
            prompt_indices=tuple(range(pool.start + i, end, active)) if trace else (),
        )
        for i, share in enumerate(arrivals)
    }


def _first_sends_s(shares: Sequence[int], ramp_s: float) -> list[tuple[float, ...]]:
    """Each worker's streams' first sends over a ramp of ``ramp_s``: the level's streams
    at even steps of ramp_s / streams, dealt round robin so that every worker's streams
    span the whole ramp (none at all without one). ``shares`` are split_evenly's: the
    first workers hold the extra streams, as round robin deals them."""
    if ramp_s <= 0:
        return [() for _ in shares]
    streams, active = sum(shares), len(shares)
    return [tuple(k * ramp_s / streams for k in range(i, streams, active)) for i in range(active)]


def _prompt_starts(
    active: int, spans: Sequence[int] | None, prompts: int, cursor: int | None
) -> list[int]:
    """Where each of ``active`` workers' prompts start in a pool of ``prompts``: from
    ``cursor`` (0), each after the ``spans`` (the prompts each one sends) of the workers
    before it; without spans (a level bounded by time), an even part each."""
    base = cursor or 0
    if spans is None:
        return [(base + (i * prompts) // active) % prompts for i in range(active)]
    starts = itertools.accumulate([base, *spans[:-1]])
    return [start % prompts for start in starts]


def worker_config(
    spec: ServingSpec,
    base_url: str,
    model: str,
    prompts: list[Prompt],
    run: RunWriter,
    headers: RequestHeaders,
) -> WorkerConfig:
    """What every load worker of the run is told once: where, what and how to send."""
    conversation = spec.workload.conversation
    return WorkerConfig(
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
        include_usage=spec.target.include_usage,
        max_tokens_field=spec.target.max_tokens_field,
        min_tokens=spec.target.min_tokens,
        sampling=spec.sampling.as_sent(),
        headers=headers,
        conversation_turns=conversation.turns if conversation else 0,
        think_time_s=conversation.think_time_s if conversation else 0.0,
        planted_send_delay_s=spec.harness.planted_send_delay_s,
    )
