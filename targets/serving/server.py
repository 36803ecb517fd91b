"""The reference target's OpenAI-compatible HTTP API (FastAPI), in front of the engine.

Endpoints: POST /v1/completions, POST /v1/chat/completions (both streamed as SSE or
whole), GET /v1/models, GET /health, POST /tokenize, POST /detokenize, GET /metrics.

The engine runs in its own thread (``EngineLoop``) and calls back from there with each
step's new tokens; ``_EngineStream`` hands them to the event loop. Each engine output
becomes exactly one chunk, so a multi-token MTP step is visible as one chunk of several
tokens. ``add_request`` and ``abort_request`` are called on the event loop: the engine
only takes its inbox lock for them, never waits for a step.

Every refusal is an OpenAI error object with a 4xx status (``errors.py``); FastAPI's own
422s and 404s are converted to that shape too.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Protocol

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.background import BackgroundTask

from targets.serving.engine.api import (
    EngineStats,
    InvalidRequestError,
    QueueFullError,
    RequestOutput,
    SamplingParams,
)
from targets.serving.errors import (
    ApiError,
    BadRequest,
    Overloaded,
    error_body,
    error_response,
    install_error_handlers,
)
from targets.serving.metrics import ReferenceMetrics
from targets.serving.openai_request import (
    DetokenizeRequest,
    GenerationJob,
    ServedModel,
    TokenizeRequest,
    chat_job,
    chat_prompt,
    check_model,
    completion_job,
    parse_body,
)
from targets.serving.openai_response import DONE_EVENT, Delta, ResponseWriter, TextAssembler

_SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class EngineHandle(Protocol):
    """What the server needs of ``targets.serving.engine.loop.EngineLoop``."""

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def add_request(
        self,
        request_id: str,
        prompt_token_ids: Sequence[int],
        params: SamplingParams,
        on_output: Callable[[RequestOutput], None],
    ) -> None: ...
    def abort_request(self, request_id: str) -> None: ...
    def stats(self) -> EngineStats: ...


@dataclass
class _State:
    engine: EngineHandle
    served: ServedModel
    metrics: ReferenceMetrics


class EngineFailed(Exception):
    """The engine ended a request with finish reason "error"."""


def build_app(
    engine: EngineHandle, served: ServedModel, registry: CollectorRegistry | None = None
) -> FastAPI:
    """The API in front of ``engine``: started with the app, stopped at its shutdown.

    ``registry`` defaults to a fresh one per app, so several apps can share a process.
    """

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine.start()
        try:
            yield
        finally:
            # The engine joins its thread: off the event loop, which may still be serving.
            await asyncio.to_thread(engine.stop)

    app = FastAPI(title="moeperf reference target", lifespan=lifespan, docs_url=None)
    app.state.serving = _State(engine, served, ReferenceMetrics(engine.stats, registry))
    install_error_handlers(app)
    app.add_api_route("/v1/completions", _completions, methods=["POST"])
    app.add_api_route("/v1/chat/completions", _chat_completions, methods=["POST"])
    app.add_api_route("/v1/models", _models, methods=["GET"])
    app.add_api_route("/health", _health, methods=["GET"])
    app.add_api_route("/tokenize", _tokenize, methods=["POST"])
    app.add_api_route("/detokenize", _detokenize, methods=["POST"])
    app.add_api_route("/metrics", _metrics, methods=["GET"])
    return app


def _state(request: Request) -> _State:
    return request.app.state.serving


# -- generation ---------------------------------------------------------------------------


async def _completions(request: Request) -> Response:
    return await _generate(request, completion_job)


async def _chat_completions(request: Request) -> Response:
    return await _generate(request, chat_job)


class _EngineStream:
    """One engine request's outputs, handed from the engine's thread to the event loop."""

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[RequestOutput] = asyncio.Queue()
        self.finished = False

    def on_output(self, output: RequestOutput) -> None:
        # Called on the engine's thread.
        with suppress(RuntimeError):  # the event loop closed: nobody is listening
            self._loop.call_soon_threadsafe(self._queue.put_nowait, output)

    async def next(self) -> RequestOutput:
        output = await self._queue.get()
        self.finished = output.finished
        return output


async def _generate(
    request: Request, parse: Callable[[ServedModel, bytes], GenerationJob]
) -> Response:
    received = time.monotonic()
    state = _state(request)
    try:
        job = parse(state.served, await request.body())
        request_id = f"{'chatcmpl' if job.chat else 'cmpl'}-{uuid.uuid4().hex}"
        stream = _EngineStream(request_id)
        _submit(state, job, stream)
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
    )
    deltas = _deltas(state, job, stream, received)
    headers = {"X-Request-Id": request_id}
    outcome = _Outcome(state, stream)
    if job.stream:
        return StreamingResponse(
            _stream_events(job, writer, deltas, outcome),
            media_type="text/event-stream",
            headers={**_SSE_HEADERS, **headers},
            # Runs even when the client left before the first chunk, which cancels the
            # body before it starts (so its own cleanup never runs).
            background=BackgroundTask(outcome.close, "abort"),
        )
    return await _whole(request, writer, deltas, outcome, headers)


def _submit(state: _State, job: GenerationJob, stream: _EngineStream) -> None:
    try:
        state.engine.add_request(stream.request_id, job.prompt_ids, job.params, stream.on_output)
    except InvalidRequestError as exc:
        raise BadRequest(str(exc)) from None
    except QueueFullError as exc:
        raise Overloaded(f"{exc}; retry later") from None


async def _deltas(
    state: _State, job: GenerationJob, stream: _EngineStream, received: float
) -> AsyncIterator[Delta]:
    """The request's deltas, one per engine output, until it finishes or a stop string."""
    text = TextAssembler(state.served.tokenizer, job.stop)
    metrics = state.metrics
    last_token_at: float | None = None
    while True:
        output = await stream.next()
        now = time.monotonic()
        tokens = output.new_token_ids
        kept = len(tokens)
        stopped = False
        for i, token in enumerate(tokens):
            if text.add(token):
                stopped, kept = True, i + 1
                break
        if tokens:
            if last_token_at is None:
                metrics.ttft.observe(now - received)
            else:
                per_token = (now - last_token_at) / len(tokens)
                for _ in range(len(tokens)):
                    metrics.itl.observe(per_token)
            last_token_at = now
        if output.finish_reason == "error":
            raise EngineFailed("the engine failed while serving this request")
        finish = "stop" if stopped else output.finish_reason
        if stopped and not output.finished:
            # The rest of the generation is not wanted: free its batch slot and KV blocks.
            _abort(state, stream)
        lps = output.new_logprobs
        yield Delta(
            text=text.take(final=finish is not None),
            logprobs=list(lps[:kept]) if lps is not None else None,
            finish_reason=finish,
            prompt_tokens=output.prompt_tokens,
            completion_tokens=output.output_tokens - (len(tokens) - kept),
            cached_tokens=output.cached_prompt_tokens,
            stop_reason=text.stop_reason,
        )
        if finish is not None:
            if finish != "abort":
                metrics.e2e.observe(now - received)
            return


def _abort(state: _State, stream: _EngineStream) -> None:
    """Ask the engine to drop the request (it answers with a last, "abort" output)."""
    stream.finished = True
    state.engine.abort_request(stream.request_id)


class _Outcome:
    """Ends a request once: aborts its engine request if still running, counts its status."""

    def __init__(self, state: _State, stream: _EngineStream) -> None:
        self._state, self._stream = state, stream
        self._closed = False

    def close(self, status: str) -> None:
        if self._closed:
            return
        self._closed = True
        if not self._stream.finished:
            _abort(self._state, self._stream)
        self._state.metrics.requests.labels(status).inc()


def _status(finish_reason: str | None) -> str:
    return {"stop": "ok", "length": "ok", "abort": "abort"}.get(finish_reason or "", "error")


async def _stream_events(
    job: GenerationJob, writer: ResponseWriter, deltas: AsyncIterator[Delta], outcome: _Outcome
) -> AsyncIterator[bytes]:
    # Starlette cancels this generator when the client disconnects (CancelledError at an
    # await): the finally block then aborts the engine request.
    status = "abort"
    last: Delta | None = None
    try:
        if job.chat:
            zero = Delta("", None, None, len(job.prompt_ids), 0, 0)
            yield writer.role_chunk(zero if job.continuous_usage else None)
        async for delta in deltas:
            last = delta
            yield writer.chunk(delta, job.continuous_usage)
        status = _status(last.finish_reason if last else None)
        if job.include_usage and last is not None:
            yield writer.usage_chunk(last)
        yield DONE_EVENT
    except EngineFailed as exc:
        status = "error"
        yield b"data: " + error_body(str(exc), kind="server_error", code=500) + b"\n\n"
        yield DONE_EVENT
    finally:
        outcome.close(status)


async def _whole(
    request: Request,
    writer: ResponseWriter,
    deltas: AsyncIterator[Delta],
    outcome: _Outcome,
    headers: dict[str, str],
) -> Response:
    collected: list[Delta] = []

    async def collect() -> None:
        async for delta in deltas:
            collected.append(delta)

    collecting = asyncio.ensure_future(collect())
    watching = asyncio.ensure_future(_disconnected(request))
    status = "abort"
    try:
        await asyncio.wait((collecting, watching), return_when=asyncio.FIRST_COMPLETED)
        if not collecting.done():  # the client went away: nobody will read the answer
            return Response(status_code=499)
        try:
            collecting.result()
        except EngineFailed as exc:
            status = "error"
            return error_response(500, str(exc), "server_error")
        status = _status(collected[-1].finish_reason)
        return Response(writer.body(collected), media_type="application/json", headers=headers)
    finally:
        collecting.cancel()
        watching.cancel()
        outcome.close(status)


async def _disconnected(request: Request) -> None:
    # The body is already read, so the next ASGI message is the client leaving.
    while (await request.receive())["type"] != "http.disconnect":
        pass


# -- the other endpoints ------------------------------------------------------------------


async def _models(request: Request) -> Response:
    served = _state(request).served
    card = {
        "id": served.name,
        "object": "model",
        "created": 0,
        "owned_by": "moeperf",
        "root": served.name,
        "parent": None,
        "max_model_len": served.max_context_len,
    }
    return JSONResponse({"object": "list", "data": [card]})


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
