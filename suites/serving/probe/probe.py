"""``moeperf probe``: a few bounded requests that find out what a target supports.

In order: a minimal streaming request (it must come back as an OpenAI stream, or the
target is refused: ``ProbeFailed``, exit 2, before any load); then the same request with
each optional field the harness may send, one at a time (``stream_options.include_usage``,
``continuous_usage_stats``, logprobs, ``ignore_eos``, ``min_tokens``), each accepted or
rejected (HTTP 400/422); then the side endpoints: ``/tokenize``, ``/detokenize``,
``/metrics`` (its dialect and counters) and a prefix-cache reset endpoint (found by
asking which methods it allows, never called). Every request asks for 8 tokens and is
bounded by ``timeout_s``; a probe is about ten small requests.
"""

from __future__ import annotations

import datetime
import json
import statistics
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import aiohttp

import moeperf.collectors.export.metric_names as mn
from moeperf.collectors.sources.target_metrics import ExpositionError, TargetSample, read_exposition
from moeperf.suites.errors import UsageError
from moeperf.suites.serving.load.auth import NO_HEADERS, RequestHeaders
from moeperf.suites.serving.load.openai_api import ENDPOINTS, Api
from moeperf.suites.serving.probe.exchange import Mask, StreamAnswer, base_body, exchange
from moeperf.suites.serving.probe.result import (
    FieldCheck,
    Honoured,
    MetricsFacts,
    ProbeResult,
    UsagePlacement,
)

PROBE_TIMEOUT_S = 30.0
PROBE_PROMPT = "Say hello, then count from one to ten."
# A target that fails the first request for its own reasons (HTTP 5xx, a dropped
# connection) gets this many tries before it is refused.
_FIRST_TRIES = 3
_SPEC_DECODE = frozenset(
    m.name for m in (mn.TARGET_DRAFT_TOKENS, mn.TARGET_ACCEPTED_TOKENS, mn.TARGET_ACCEPT_LENGTH)
)
_PREFIX_CACHE = frozenset(
    m.name for m in (mn.TARGET_PREFIX_HITS, mn.TARGET_PREFIX_QUERIES, mn.TARGET_PREFIX_HIT_RATIO)
)
# vLLM (POST, with VLLM_SERVER_DEV_MODE=1) and SGLang: the endpoints that empty the cache.
_RESET_ENDPOINTS = ("/reset_prefix_cache", "/flush_cache")


class ProbeFailed(UsageError):
    """The target's answer to a minimal streaming request is not an OpenAI stream."""


async def probe_target(
    base_url: str,
    api: Api,
    model: str,
    models: Sequence[str] = (),
    headers: RequestHeaders = NO_HEADERS,
    timeout_s: float = PROBE_TIMEOUT_S,
) -> ProbeResult:
    """Probe ``base_url`` (its pre-flight already found ``models``), sending ``headers``
    and masking their secrets in whatever the target says; raise ``ProbeFailed`` when a
    minimal streaming request does not come back as an OpenAI stream."""
    base = base_url.rstrip("/")
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    mask: Mask = headers.redact
    async with aiohttp.ClientSession(headers=dict(headers.values), timeout=timeout) as session:

        async def ask(body: dict[str, Any]) -> StreamAnswer:
            return await exchange(session, base, api, body, mask)

        body = base_body(api, model, PROBE_PROMPT)
        first = await _first_answer(ask, body)
        if not first.ok:
            raise ProbeFailed(_refusal(base, api, first))
        usage = await ask({**body, "stream_options": {"include_usage": True}})
        continuous_options = {"include_usage": True, "continuous_usage_stats": True}
        continuous = await ask({**body, "stream_options": continuous_options})
        logprobs_fields: dict[str, Any] = (
            {"logprobs": True, "top_logprobs": 0} if api == "chat" else {"logprobs": 0}
        )
        logprobs = await ask({**body, **logprobs_fields})
        ignore_eos = await ask({**body, "ignore_eos": True})
        min_tokens = await ask({**body, "min_tokens": 2})
        tokens = await _tokenize(session, base, model)
        detokenize = tokens is not None and await _detokenize(session, base, model, tokens)
        metrics = await _metrics(session, base, mask)
        reset = await _reset_endpoint(session, base)
    per_chunk, source = _exact_chunk_tokens(continuous, logprobs)
    return ProbeResult(
        url=base,
        api=api,
        model=model,
        models=tuple(models),
        probed_at=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        sends_done=first.done,
        role_first_chunk=bool(first.chunks) and first.chunks[0].role_only,
        usage_unasked=bool(first.usage_chunks),
        usage_placement=_placement(usage),
        continuous_usage=_honoured(continuous, _usage_every_chunk),
        logprobs_per_chunk=_honoured(logprobs, _logprobs_every_chunk),
        tokens_per_chunk_max=max(per_chunk) if per_chunk else None,
        tokens_per_chunk_mean=statistics.fmean(per_chunk) if per_chunk else None,
        tokens_per_chunk_source=source,
        fields=(
            _field("stream_options", usage),
            _field("continuous_usage_stats", continuous),
            _field("logprobs", logprobs),
            _field("ignore_eos", ignore_eos),
            _field("min_tokens", min_tokens),
        ),
        tokenize=tokens is not None,
        detokenize=detokenize,
        metrics=metrics,
        prefix_cache_reset=reset,
    )


async def _first_answer(
    ask: Callable[[dict[str, Any]], Awaitable[StreamAnswer]], body: dict[str, Any]
) -> StreamAnswer:
    answer = await ask(body)
    for _ in range(_FIRST_TRIES - 1):
        if answer.ok or (answer.status is not None and answer.status < 500):
            break
        answer = await ask(body)
    return answer


def _refusal(base: str, api: Api, answer: StreamAnswer) -> str:
    endpoint = base + ENDPOINTS[api]
    said = f"{answer.problem}" + (f": {answer.body.strip()}" if answer.body.strip() else "")
    head = f"target {base} failed the probe: a minimal streaming {api} request to {endpoint}"
    head += f" got {said}"
    if answer.status in (401, 403):
        fix = "it wants credentials: set target.api_key_env (moeperf probe --api-key-env VAR)"
    elif answer.status == 404:
        other = "completions" if api == "chat" else "chat"
        fix = f"it has no such endpoint: is it the other API (--api {other}) or another URL?"
    elif answer.status is not None and answer.status >= 500:
        fix = f"it failed {_FIRST_TRIES} tries for its own reasons: check the server's log"
    else:
        fix = "it does not answer as an OpenAI-compatible streaming server"
    return f"{head}; {fix}. Nothing was sent at load and no run was stored"


def _field(name: str, answer: StreamAnswer) -> FieldCheck:
    if answer.ok:
        return FieldCheck(name, "accepted", f"HTTP {answer.status}")
    detail = f"{answer.problem}: {answer.body.strip()}"[:300] if answer.body else answer.problem
    if answer.status in (400, 422):
        return FieldCheck(name, "rejected", detail or "")
    return FieldCheck(name, "failed", detail or "")


def _usage_every_chunk(answer: StreamAnswer) -> bool:
    return all(c.usage_completion_tokens is not None for c in answer.token_chunks)


def _logprobs_every_chunk(answer: StreamAnswer) -> bool:
    return all(c.logprob_tokens is not None for c in answer.token_chunks)


def _honoured(answer: StreamAnswer, every_chunk: Any) -> Honoured:
    if not answer.ok:
        return "rejected" if answer.status in (400, 422) else "failed"
    return "honoured" if every_chunk(answer) else "ignored"


def _placement(answer: StreamAnswer) -> UsagePlacement:
    if not answer.ok:
        return "rejected" if answer.status in (400, 422) else "absent"
    if not answer.usage_chunks:
        return "absent"
    if len(answer.token_chunks) > 1 and _usage_every_chunk(answer):
        return "every_chunk"
    if any(not c.has_choices for c in answer.usage_chunks):
        return "separate_chunk"
    return "finish_chunk"


def _exact_chunk_tokens(
    continuous: StreamAnswer, logprobs: StreamAnswer
) -> tuple[list[int], str | None]:
    """Tokens of each token chunk, from cumulative usage or per-token logprobs."""
    if continuous.ok and continuous.token_chunks and _usage_every_chunk(continuous):
        counts, previous = [], 0
        for chunk in continuous.token_chunks:
            total = chunk.usage_completion_tokens or 0
            counts.append(total - previous)
            previous = total
        return counts, "usage"
    if logprobs.ok and logprobs.token_chunks and _logprobs_every_chunk(logprobs):
        return [c.logprob_tokens or 0 for c in logprobs.token_chunks], "logprobs"
    return [], None


async def _post_json(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any]
) -> dict[str, Any] | None:
    try:
        async with session.post(url, json=body) as response:
            if response.status != 200:
                return None
            data = json.loads(await response.read())
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None
    return data if isinstance(data, dict) else None


async def _tokenize(session: aiohttp.ClientSession, base: str, model: str) -> list[int] | None:
    """vLLM's (and the reference target's) POST /tokenize: the prompt's token ids."""
    data = await _post_json(session, base + "/tokenize", {"model": model, "prompt": "Hello world"})
    tokens = data.get("tokens") if data else None
    if isinstance(tokens, list) and tokens and all(isinstance(t, int) for t in tokens):
        return tokens
    return None


async def _detokenize(
    session: aiohttp.ClientSession, base: str, model: str, tokens: list[int]
) -> bool:
    data = await _post_json(session, base + "/detokenize", {"model": model, "tokens": tokens})
    return data is not None and isinstance(data.get("prompt"), str)


async def _metrics(session: aiohttp.ClientSession, base: str, mask: Mask) -> MetricsFacts:
    try:
        async with session.get(base + "/metrics") as response:
            if response.status != 200:
                return MetricsFacts(False, f"HTTP {response.status}")
            text = (await response.read()).decode("utf-8", errors="replace")
    except (aiohttp.ClientError, TimeoutError) as exc:
        return MetricsFacts(False, mask(f"{type(exc).__name__}: {exc}".rstrip(": ")))
    try:
        dialect, samples = read_exposition(text)
    except ExpositionError as exc:
        return MetricsFacts(False, f"not Prometheus text: {mask(str(exc))[:200]}")
    names = _names(samples)
    return MetricsFacts(
        available=True,
        detail=f"{len(text.splitlines())} lines",
        dialect=dialect,
        spec_decode_counters=bool(names & _SPEC_DECODE),
        prefix_cache_counters=bool(names & _PREFIX_CACHE),
    )


def _names(samples: Sequence[TargetSample]) -> set[str]:
    return {s.name for s in samples}


async def _reset_endpoint(session: aiohttp.ClientSession, base: str) -> str | None:
    """The first reset endpoint that exists, asked with OPTIONS: a route that takes only
    POST answers 405, one that does not exist 404; nothing is reset."""
    for path in _RESET_ENDPOINTS:
        try:
            async with session.options(base + path) as response:
                if response.status in (200, 204, 405):
                    return path
        except (aiohttp.ClientError, TimeoutError):
            return None
    return None
