"""The reference target's OpenAI-compatible HTTP API (FastAPI), in front of the engine.

Endpoints: POST /v1/completions, POST /v1/chat/completions (both streamed as SSE or
whole), GET /v1/models, GET /health, POST /tokenize, POST /detokenize, GET /metrics,
POST /reset_prefix_cache (vLLM's: forget every cached prefix block). Started with an API
key, every /v1/* route answers 401 without it (``auth.py``); the others stay open, as
vLLM's do.

The engine runs in its own thread (``EngineLoop``); how its outputs become a response is
``streaming.py``, in the shape the server's ``WireVariant`` gives each request.
``add_request`` and ``abort_request`` are called on the event loop: the engine only takes
its inbox lock for them, never waits for a step.

Every refusal is an OpenAI error object with a 4xx status (``errors.py``); FastAPI's own
422s and 404s are converted to that shape too. The one exception is on purpose: with
``reject_unknown_fields`` an unknown field is a 422 in FastAPI's own shape, as a strict
server answers.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.background import BackgroundTask

from moeperf.targets.openai_wire import ApiError, BadRequest, WireVariant, json_or_none, models_list
from moeperf.targets.serving.auth import ApiKeyMiddleware
from moeperf.targets.serving.errors import install_error_handlers
from moeperf.targets.serving.http_limits import Asgi, HttpGuard, HttpLimits
from moeperf.targets.serving.metrics import ReferenceMetrics
from moeperf.targets.serving.openai_bodies import DetokenizeRequest, TokenizeRequest, parse_body
from moeperf.targets.serving.openai_request import (
    GenerationJob,
    ServedModel,
    chat_job,
    chat_prompt,
    check_model,
    completion_job,
)
from moeperf.targets.serving.openai_response import ResponseWriter
from moeperf.targets.serving.openapi import document
from moeperf.targets.serving.streaming import (
    EngineStream,
    Outcome,
    ServingState,
    engine_deltas,
    stream_events,
    submit,
    whole,
)

if TYPE_CHECKING:
    from moeperf.targets.serving.engine.loop import EngineLoop

_VLLM_WIRE = WireVariant()
_LIMITS = HttpLimits()
_SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def build_app(
    engine: EngineLoop,
    served: ServedModel,
    registry: CollectorRegistry | None = None,
    wire: WireVariant = _VLLM_WIRE,
    *,
    api_key: str | None = None,
    limits: HttpLimits = _LIMITS,
) -> FastAPI:
    """The API in front of ``engine``: started with the app, stopped at its shutdown.
    With ``api_key``, every /v1/* route wants it as a bearer token (``auth.py``).
    ``limits`` bound each client's body size, body time and write time (http_limits.py).

    ``registry`` defaults to a fresh one per app, so several apps can share a process;
    ``wire`` is how its streams differ from vLLM's (by default they do not).
    """

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine.start()
        try:
            yield
        finally:
            # The engine joins its thread: off the event loop, which may still be serving.
            await asyncio.to_thread(engine.stop)

    app = _GuardedApp(title="moeperf reference target", lifespan=lifespan, docs_url=None)
    app.state.limits = limits
    metrics = ReferenceMetrics(engine.stats, registry)
    app.state.serving = ServingState(engine, served, metrics, wire)
    install_error_handlers(app)
    if api_key is not None:
        app.add_middleware(ApiKeyMiddleware, api_key=api_key)
    app.add_api_route("/v1/completions", _completions, methods=["POST"])
    app.add_api_route("/v1/chat/completions", _chat_completions, methods=["POST"])
    app.add_api_route("/v1/models", _models, methods=["GET"])
    app.add_api_route("/health", _health, methods=["GET"])
    app.add_api_route("/tokenize", _tokenize, methods=["POST"])
    app.add_api_route("/detokenize", _detokenize, methods=["POST"])
    app.add_api_route("/metrics", _metrics, methods=["GET"])
    app.add_api_route("/reset_prefix_cache", _reset_prefix_cache, methods=["POST"])
    document(app, api_key=api_key is not None, strict_fields=wire.reject_unknown_fields)
    return app


class _GuardedApp(FastAPI):
    """FastAPI with ``HttpGuard`` outside all its middleware, where it gets the server's
    own ``send`` (to abort a connection whose client stopped reading)."""

    def build_middleware_stack(self) -> Asgi:
        return HttpGuard(super().build_middleware_stack(), self.state.limits)


def _json_or_none(raw: bytes) -> object:
    """``json_or_none``, and None for JSON nested deeper than Python's parser recurses
    (the request parser then refuses it with a 400)."""
    try:
        return json_or_none(raw)
    except RecursionError:
        return None


def _state(request: Request) -> ServingState:
    return request.app.state.serving


# -- generation ---------------------------------------------------------------------------


async def _completions(request: Request) -> Response:
    return await _generate(request, completion_job, chat=False)


async def _chat_completions(request: Request) -> Response:
    return await _generate(request, chat_job, chat=True)


async def _generate(
    request: Request, parse: Callable[[ServedModel, bytes], GenerationJob], *, chat: bool
) -> Response:
    received = time.monotonic()
    state = _state(request)
    try:
        raw = await request.body()
        if state.wire.reject_unknown_fields:  # the body is parsed twice only then
            state.wire.check_fields(_json_or_none(raw), chat=chat)
        job = parse(state.served, raw)
        request_id = f"{'chatcmpl' if job.chat else 'cmpl'}-{uuid.uuid4().hex}"
        stream = EngineStream(request_id)
        submit(state, job, stream)
    except ApiError:
        # A refused request is an outcome too: the harness compares it with its own count.
        state.metrics.requests.labels("error").inc()
        raise
    writer = ResponseWriter(
        tokenizer=state.served.tokenizer,
        chat=job.chat,
        response_id=request_id,
        created=int(time.time()),
        model=state.served.name,
        logprobs=job.logprobs,
        echo_text=job.echo_text,
        prompt_ids=job.prompt_ids,
        echo_top=job.params.logprobs or 0,
        prompt_top=job.prompt_logprobs,
        tokens_as_ids=job.tokens_as_ids,
    )
    deltas = engine_deltas(state, job, stream, received)
    headers = {"X-Request-Id": request_id}
    outcome = Outcome(state, stream)
    shape = state.wire.shape(
        chat=job.chat, include_usage=job.include_usage, continuous_usage=job.continuous_usage
    )
    if job.stream:
        return StreamingResponse(
            stream_events(shape, job, writer, deltas, outcome),
            media_type="text/event-stream",
            headers={**_SSE_HEADERS, **headers},
            # Runs even when the client left before the first chunk, which cancels the
            # body before it starts (so its own cleanup never runs).
            background=BackgroundTask(outcome.close, "abort"),
        )
    return await whole(shape, request, writer, deltas, outcome, headers)


# -- the other endpoints ------------------------------------------------------------------


async def _models(request: Request) -> Response:
    served = _state(request).served
    return JSONResponse(models_list(served.name, served.max_context_len))


async def _health(request: Request) -> Response:
    return Response(status_code=200)


async def _tokenize(request: Request) -> Response:
    """vLLM's /tokenize: ``{"prompt": str}`` or ``{"messages": [...]}``."""
    served = _state(request).served
    body = parse_body(TokenizeRequest, await request.body())
    check_model(served, body.model)
    if body.messages is not None:
        tokens = chat_prompt(served, body.messages, body.add_generation_prompt is not False)
    elif body.prompt is not None:
        served.check_text_fits(len(body.prompt), "prompt")
        tokens = served.tokenizer.encode(body.prompt)
    else:
        raise BadRequest("give 'prompt' or 'messages'", "prompt")
    return JSONResponse(
        {"tokens": tokens, "count": len(tokens), "max_model_len": served.max_context_len}
    )


async def _detokenize(request: Request) -> Response:
    """vLLM's /detokenize: ``{"tokens": [int]}`` -> ``{"prompt": str}``."""
    served = _state(request).served
    body = parse_body(DetokenizeRequest, await request.body())
    check_model(served, body.model)
    vocab = served.tokenizer.vocab_size
    if any(not 0 <= t < vocab for t in body.tokens):
        raise BadRequest(f"token ids must be in [0, {vocab})", "tokens")
    return JSONResponse({"prompt": served.tokenizer.decode(body.tokens)})


def _metrics(request: Request) -> Response:
    # A plain def: FastAPI runs it in a worker thread, so rendering the exposition (a few
    # hundred series) does not delay the chunks being streamed.
    registry = _state(request).metrics.registry
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


async def _reset_prefix_cache(request: Request) -> Response:
    """vLLM's /reset_prefix_cache: no later request hits a block cached before it."""
    state = _state(request)
    # Applied by the engine's thread at its next step; the event loop awaits, not blocks.
    dropped = await asyncio.wrap_future(state.engine.request_prefix_cache_reset())
    state.metrics.prefix_cache_resets.inc()
    return JSONResponse({"reset": True, "dropped_blocks": dropped})
