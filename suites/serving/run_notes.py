"""What a serving run's notes say of how it ran: each level's window, the sweep, the target,
the prefix cache's resets, and the prompts: the pools' sizes and a level's repeats."""

from __future__ import annotations

from collections.abc import Iterable

from moeperf.suites.serving.level_plan import LevelOutcome
from moeperf.suites.serving.spec import ServingSpec
from moeperf.suites.serving.workload.sweep import SweepRun
from moeperf.suites.serving.workload.trace import Trace


def cache_note(spec: ServingSpec, outcomes: list[LevelOutcome]) -> str:
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


def window_note(spec: ServingSpec, trace: Trace | None = None) -> str:
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


def sweep_note(sweep: SweepRun) -> str:
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


def repeats_note(spec: ServingSpec, outcome: LevelOutcome) -> str:
    """What a level that sent some prompt twice says ("" when none did): a no-reuse control
    level especially, whose hit rate is then no clean control."""
    repeated = outcome.repeated_prompts
    if not repeated:
        return ""
    sent, distinct = outcome.sent, outcome.pool_prompts
    said = (
        f"{outcome.scenario} repeated {repeated} of its {sent} prompts (sent again within "
        f"the level; its pool held {distinct} distinct prompts)"
    )
    if outcome.unique:
        said = f"Control level {said}: its hit rate is not a clean control"
    else:
        said = f"Level {said}: a target with a prefix cache may serve the repeats from it"
    workload = spec.workload
    if workload.cache == "reuse":
        return f"{said} (workload.cache = 'reuse' sends the same prompts again by design)."
    fix = f"raise workload.num_prompts to at least {sent}"
    if workload.kind == "dataset":
        fix += " (a dataset gives no more than its own records)"
    return f"{said}; {fix}."


def pool_note(spec: ServingSpec, sizes: Iterable[int]) -> str:
    """What the run says when a prompt pool holds more than workload.num_prompts ("" when
    none does): enough prompts that no level sends one twice (``schedule.pool_size``)."""
    workload, load = spec.workload, spec.load
    largest = max(sizes, default=0)
    if workload.kind == "trace" or largest <= workload.num_prompts:
        return ""
    why = []
    if load.max_requests is not None:
        extra = " (a capacity probe: and a warm-up request a stream)" if spec.capacity else ""
        why.append(f"a level sends at most load.max_requests = {load.max_requests}{extra}")
    if load.mode in ("poisson", "gamma"):
        why.append(
            f"an open-loop level sends about its rate times {load.level_limit_s:g} s (with 4 "
            "standard deviations to spare)"
        )
    return (
        f"Prompts: workload.num_prompts = {workload.num_prompts} raised to as many as "
        f"{largest} a pool, so that no level sends a prompt twice: {'; '.join(why)}."
    )
