"""A serving run prepared before anything is stored or sent: the spec adapted to what a
probed url target takes, the sweep's prompt lengths against the context limit, and the
levels' schedule with every prompt pool built."""

from __future__ import annotations

import asyncio
from typing import Any

from moeperf.suites.errors import UsageError
from moeperf.suites.serving.capacity.run import probe_budget
from moeperf.suites.serving.level_loop import PlannedLevels, probe_key
from moeperf.suites.serving.load.auth import (
    RequestHeaders,
)
from moeperf.suites.serving.preflight import TargetCheck
from moeperf.suites.serving.probe.adapt import adapt_target
from moeperf.suites.serving.probe.probe import probe_target
from moeperf.suites.serving.schedule import (
    PlannedLevel,
    PromptPool,
    level_schedule,
    pool_keys,
    pool_size,
)
from moeperf.suites.serving.spec import ServingSpec
from moeperf.suites.serving.sweep_plan import resolve_plan, sweep_plan
from moeperf.suites.serving.workload.prompts import PoolKey, build_prompt_pools
from moeperf.suites.serving.workload.sources import Prompt
from moeperf.suites.serving.workload.sweep import (
    SweepRun,
    context_limit,
    sweep_points,
)
from moeperf.suites.serving.workload.trace import Trace


def sweep_run(spec: ServingSpec, check: TargetCheck, model: str) -> SweepRun | None:
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
    return SweepRun(points, limit, spec.max_output_tokens, spec.load.mode, predicted)


def planned_levels(
    spec: ServingSpec,
    base_url: str,
    headers: RequestHeaders,
    sweep: SweepRun | None,
    trace: Trace | None = None,
) -> PlannedLevels:
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
    keys += [k for k in (probe_key(spec, n) for n in probes) if k not in keys]
    sizes = [_pool_size(spec, schedule, key) for key in keys]
    built = asyncio.run(build_prompt_pools(spec, base_url, headers, keys, sizes))
    prompts: list[Prompt] = []
    pools = {}
    for key, pool in zip(keys, built, strict=True):
        pools[key] = PromptPool(len(prompts), len(pool), key.input_tokens, key.unique)
        prompts += pool
    return PlannedLevels(prompts, pools, schedule, sweep, trace)


def _pool_size(spec: ServingSpec, schedule: list[PlannedLevel], key: PoolKey) -> int:
    """The prompts of one pool: enough for the levels that draw from it (``pool_size``);
    a capacity search's, for its max_level with that many warm-up requests on top (one a
    stream; the rest of a probe's warm-up depends on the rate it meets). A fit's probes
    are bounded by time: workload.num_prompts."""
    levels = [planned.level for planned in schedule if planned.key == key]
    if spec.capacity is not None and key == probe_key(spec, None):
        top = spec.capacity.max_level
        budget = probe_budget(spec, top, 0.0)  # None: a probe bounded as [load] says
        warm_up = 0 if budget is None else budget - (spec.load.max_requests or 0)
        return pool_size(spec, [top], extra=warm_up)
    return pool_size(spec, levels)


def probed_spec(
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
