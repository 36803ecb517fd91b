"""The synthetic OpenAI-compatible server: known latencies, recorded ground truth.

Each generation request is planned up front (``plan.py``), waits for a stream slot when
``max_concurrent_streams`` are already being answered (``slots.py``), then every token
chunk is written at an absolute deadline, ``dequeued + ttft + inter-chunk delays``
(dequeued = received when it did not wait), so a late chunk (event-loop lag) does not
push back the ones after it. The clock is read right before each write hands the bytes
to the socket and kept per response id (``ground_truth.py``) for clients to compare with.

Where the stream differs from vLLM's (role chunk, usage, ``[DONE]``, strict fields) is the
config's ``WireVariant``; its ``shape`` of each response is followed here and in
``openai_format.py``. The role chunk carries no token, so it is not in the ground truth.

Endpoints: POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health,
POST /tokenize, GET /metrics, GET /ground_truth/{id}, POST /ground_truth/query.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from moeperf.targets.openai_wire import (
    DONE_EVENT,
    ApiError,
    BadRequest,
    StreamShape,
    WireVariant,
    error_body,
    models_list,
)
from moeperf.targets.synthetic.config import SyntheticConfig
from moeperf.targets.synthetic.drill import (
    DrillRequestError,
    DrillWindows,
    FaultWindow,
    parse_window,
    reset_connection,
)
from moeperf.targets.synthetic.ground_truth import GroundTruthRecord, GroundTruthStore
from moeperf.targets.synthetic.metrics import SyntheticMetrics
from moeperf.targets.synthetic.openai_format import MALFORMED_EVENT, MALFORMED_JSON, ChunkEncoder
from moeperf.targets.synthetic.openai_request import (
    MAX_MODEL_LEN,
    BodyReadTimeout,
    GenerationRequest,
    PayloadTooLarge,
    parse_generation,
    parse_json_object,
    prompt_text,
)
from moeperf.targets.synthetic.plan import NS_PER_S, RequestPlan, malformed, plan_request
from moeperf.targets.synthetic.slots import StreamSlots
from moeperf.targets.synthetic.tokenizer import encode, token_strs

ClockNs = Callable[[], int]

_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
# The last stretch before a deadline spent yielding rather than on a (coarse) timer.
_SPIN_NS = 1_000_000


@dataclass
class _State:
    config: SyntheticConfig
    wire: WireVariant
    clock_ns: ClockNs
    store: GroundTruthStore
    slots: StreamSlots
    metrics: SyntheticMetrics
    drill: DrillWindows
    # Request index: part of the response id and of the seed of the request's draws.
    indices: itertools.count = field(default_factory=lambda: itertools.count(1))
    # The soak's planted leak (config.leak_bytes_per_request, a test switch): never freed.
    leaked: list[bytes] = field(default_factory=list)


_STATE = web.AppKey("synthetic_state", _State)


def build_app(
    config: SyntheticConfig,
    clock_ns: ClockNs = time.monotonic_ns,
    registry: CollectorRegistry | None = None,
) -> web.Application:
    """The aiohttp application of the synthetic server.

    ``clock_ns`` stamps the ground truth and paces the deadlines, so it must advance with
    real time (``time.monotonic_ns``, possibly offset). ``registry`` defaults to a fresh
    one per app. Run it with ``handler_cancellation=True`` (``running.py`` does), or a
    request whose client goes away while it waits for a stream slot keeps its place in the
    queue until its first write fails.
    """
    app = web.Application(client_max_size=config.max_body_bytes)
    slots = StreamSlots(config.max_concurrent_streams)
    app[_STATE] = _State(
        config=config,
        wire=config.wire_variant(),
        clock_ns=clock_ns,
        store=GroundTruthStore(config.max_records),
        slots=slots,
        metrics=SyntheticMetrics(registry if registry is not None else CollectorRegistry(), slots),
        drill=DrillWindows(clock_ns),
    )
    app.router.add_post("/v1/chat/completions", _chat_completions)
    app.router.add_post("/v1/completions", _completions)
    app.router.add_get("/v1/models", _models)
    app.router.add_get("/health", _health)
    app.router.add_post("/tokenize", _tokenize)
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/ground_truth/{id}", _ground_truth_one)
    app.router.add_post("/ground_truth/query", _ground_truth_query)
    if config.drill_control:
        app.router.add_post("/drill/fault", _drill_fault)
    return app


async def _chat_completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, chat=True)


async def _completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, chat=False)


async def _generate(request: web.Request, *, chat: bool) -> web.StreamResponse:
    state = request.app[_STATE]
    received_ns = state.clock_ns()
    metrics = state.metrics
    record: GroundTruthRecord | None = None
    try:
        try:
            body = parse_json_object(await _read_body(request))
            state.wire.check_fields(body, chat=chat)
            gen = parse_generation(
                body,
                chat=chat,
                model=state.config.model,
                default_output_tokens=state.config.default_output_tokens,
            )
        except ApiError as exc:
            return _refusal(exc)
        window = state.drill.active()
        if window is not None and window.kind != "malformed":
            return _drill_answer(request, window)
        # Drawn on acceptance, before any queue wait: the n-th request accepted keeps the
        # n-th plan whatever the stream limit.
        index = next(state.indices)
        plan = plan_request(state.config, index, gen.output_tokens)
        if window is not None and plan.fault is None:
            plan = malformed(plan)
        record = GroundTruthRecord(
            id=f"{'chatcmpl' if chat else 'cmpl'}-{index}",
            stream=gen.stream,
            received_ns=received_ns,
            prompt_tokens=gen.prompt_tokens,
            fault=plan.fault,
            fault_chunk=plan.fault_chunk,
        )
        state.store.add(record)
        if state.config.leak_bytes_per_request:
            # Written bytes, not a reservation: the pages are committed and RSS grows.
            state.leaked.append(b"\xa5" * state.config.leak_bytes_per_request)
        metrics.prompt_tokens.inc(gen.prompt_tokens)
        if plan.fault is not None:
            metrics.faults.labels(plan.fault).inc()
        # The slot is held from here to the end of the response, whatever ends it; a
        # client that goes away cancels this handler (handler_cancellation), freeing it.
        async with state.slots:
            return await _answer(request, state, gen, plan, record)
    except asyncio.CancelledError:
        if record is not None:
            record.status = "cancelled"
        raise
    finally:
        status = "invalid" if record is None else record.status
        # "waiting" or "running" here means an exception escaped: count it as an error.
        metrics.requests.labels("error" if status in ("waiting", "running") else status).inc()


async def _answer(
    request: web.Request,
    state: _State,
    gen: GenerationRequest,
    plan: RequestPlan,
    record: GroundTruthRecord,
) -> web.StreamResponse:
    # Called holding a stream slot: the request leaves the queue now, and the plan's
    # deadlines count from here.
    record.dequeued_ns = dequeued_ns = state.clock_ns()
    record.status = "running"
    if plan.fault == "error":
        record.status = "error"
        record.done_ns = state.clock_ns()
        response = _error(500, "synthetic fault: injected server error", kind="server_error")
        response.headers["X-Request-Id"] = record.id
        return response
    shape = state.wire.shape(
        chat=gen.chat, include_usage=gen.include_usage, continuous_usage=gen.continuous_usage
    )
    job = _Job(gen, plan, record, shape, dequeued_ns)
    # A client that stops reading stalls a write for good (aiohttp's drain has no
    # timeout): past its plan's end by write_timeout_s, the response is given up.
    late_s = (dequeued_ns + plan.due_ns[-1] - state.clock_ns()) / NS_PER_S
    try:
        async with asyncio.timeout(late_s + state.config.write_timeout_s):
            if gen.stream:
                return await _stream(request, state, job)
            return await _whole(request, state, job)
    except TimeoutError:
        if request.transport is not None:
            request.transport.abort()  # not close(): that waits for the unread bytes
        raise asyncio.CancelledError from None  # the connection is gone: "cancelled"


@dataclass(frozen=True)
class _Job:
    """A planned generation request: what was asked, how it is answered, its record.

    ``dequeued_ns`` is when it got its stream slot: the plan's deadlines count from it.
    """

    gen: GenerationRequest
    plan: RequestPlan
    record: GroundTruthRecord
    shape: StreamShape
    dequeued_ns: int


async def _stream(request: web.Request, state: _State, job: _Job) -> web.StreamResponse:
    plan, record, shape = job.plan, job.record, job.shape
    clock_ns = state.clock_ns
    encoder = _encoder(state, job)
    response = web.StreamResponse(headers={**_SSE_HEADERS, "X-Request-Id": record.id})
    # Bound once: the loop below runs per chunk.
    write = response.write
    note_write = record.chunk_write_ns.append
    note_tokens = record.chunk_tokens.append
    count_tokens = state.metrics.generation_tokens.inc
    last = len(plan.chunk_tokens) - 1
    start = 0
    dequeued_ns = job.dequeued_ns
    try:
        await response.prepare(request)
        if shape.role_chunk:
            await write(encoder.role())
        for i, (tokens, due_ns) in enumerate(zip(plan.chunk_tokens, plan.due_ns, strict=True)):
            if i == plan.fault_chunk:
                if plan.fault == "malformed":
                    await write(MALFORMED_EVENT)
                elif plan.fault == "truncate":
                    _close_connection(request)
                    record.status = "truncated"
                    return response
            due_ns += dequeued_ns
            await _sleep_until(clock_ns, due_ns)
            chunk = encoder.tokens(start, tokens, i == last)
            # Stamped just before the write: aiohttp hands the bytes to the socket
            # synchronously inside it, and a client may read them before write returns.
            written_ns = clock_ns()
            await write(chunk)
            note_write(written_ns)
            note_tokens(tokens)
            record.max_lag_ns = max(record.max_lag_ns, written_ns - due_ns)
            count_tokens(tokens)
            start += tokens
        if shape.usage_chunk:
            await write(encoder.usage(start))
        if shape.done:
            await write(DONE_EVENT)
        record.done_ns = clock_ns()
        record.status = "ok"
    except ConnectionError:
        # The client went away (aiohttp raises ClientConnectionResetError on the write).
        record.status = "cancelled"
    return response


async def _whole(request: web.Request, state: _State, job: _Job) -> web.StreamResponse:
    gen, plan, record = job.gen, job.plan, job.record
    # A non-streamed response is one write of all tokens, due when the last chunk would be.
    due_ns = job.dequeued_ns + plan.due_ns[-1]
    await _sleep_until(state.clock_ns, due_ns)
    if plan.fault == "malformed":
        body = MALFORMED_JSON
    else:
        body = _encoder(state, job).whole(gen.output_tokens)
    response = web.StreamResponse(
        headers={"Content-Type": "application/json", "X-Request-Id": record.id}
    )
    response.content_length = len(body)
    try:
        await response.prepare(request)
        if plan.fault == "truncate":
            await response.write(body[: len(body) // 2])
            _close_connection(request)
            record.status = "truncated"
            return response
        written_ns = state.clock_ns()
        await response.write(body)
        if plan.fault != "malformed":
            record.chunk_write_ns.append(written_ns)
            record.chunk_tokens.append(gen.output_tokens)
            record.max_lag_ns = written_ns - due_ns
            state.metrics.generation_tokens.inc(gen.output_tokens)
        await response.write_eof()
        record.done_ns = state.clock_ns()
        record.status = "ok"
    except ConnectionError:
        record.status = "cancelled"
    return response


def _encoder(state: _State, job: _Job) -> ChunkEncoder:
    gen = job.gen
    return ChunkEncoder(
        chat=gen.chat,
        response_id=job.record.id,
        created=int(time.time()),
        model=state.config.model,
        prompt_tokens=gen.prompt_tokens,
        logprobs=gen.logprobs,
        shape=job.shape,
    )


async def _sleep_until(clock_ns: ClockNs, due_ns: int) -> None:
    # uvloop's timers have millisecond resolution (rounded) and can fire early or late by
    # about that much, so sleep to _SPIN_NS before the deadline, then yield to the loop
    # until it passes: the chunk is never early, and late only by the loop's own lag.
    while (remaining_ns := due_ns - clock_ns()) > 0:
        await asyncio.sleep(max(0, remaining_ns - _SPIN_NS) / NS_PER_S)


def _close_connection(request: web.Request) -> None:
    # close(), not abort(): what was written is flushed, then FIN, with no final chunk of
    # the chunked encoding (or fewer bytes than Content-Length), so the client sees an
    # incomplete body. aiohttp's own write_eof afterwards fails quietly (ConnectionError).
    transport = request.transport
    if transport is not None:
        transport.close()


def _error(status: int, message: str, *, kind: str) -> web.Response:
    body = error_body(message, kind=kind, code=status)
    return web.Response(status=status, body=body, content_type="application/json")


def _refusal(exc: ApiError) -> web.Response:
    response = web.Response(status=exc.status, body=exc.body(), content_type="application/json")
    if isinstance(exc, PayloadTooLarge | BodyReadTimeout):
        response.force_close()  # the rest of the body is never read
    return response


async def _read_body(request: web.Request) -> bytes:
    """The body, bounded (aiohttp waits for a body's bytes as long as they take): 413
    over max_body_bytes, declared or as it arrives; 408 unless it is all in within
    body_read_timeout_s. Read before any stream slot is taken, so a slow body holds none."""
    config = request.app[_STATE].config
    limit = config.max_body_bytes
    too_large = PayloadTooLarge(
        f"The request body is larger than this server's limit of {limit} bytes (max_body_bytes).",
    )
    if request.content_length is not None and request.content_length > limit:
        raise too_large
    try:
        async with asyncio.timeout(config.body_read_timeout_s):
            return await request.read()
    except TimeoutError:
        raise BodyReadTimeout(
            f"The request body did not arrive within {config.body_read_timeout_s:g} s of its "
            "headers (body_read_timeout_s)."
        ) from None
    except web.HTTPRequestEntityTooLarge:
        raise too_large from None


async def _models(request: web.Request) -> web.Response:
    model = request.app[_STATE].config.model
    return web.json_response(models_list(model, MAX_MODEL_LEN))


async def _health(request: web.Request) -> web.Response:
    return web.Response(status=200)


async def _tokenize(request: web.Request) -> web.Response:
    """vLLM's /tokenize: ``{"prompt": str}`` or ``{"messages": [...]}``."""
    try:
        body = parse_json_object(await _read_body(request))
        if "messages" in body:
            text = prompt_text(body, chat=True)
        elif "prompt" in body:
            text = prompt_text(body, chat=False)
        else:
            raise BadRequest("give 'prompt' or 'messages'", "prompt")
    except ApiError as exc:
        return _refusal(exc)
    tokens = encode(text)
    result: dict[str, object] = {
        "count": len(tokens),
        "max_model_len": MAX_MODEL_LEN,
        "tokens": tokens,
    }
    if body.get("return_token_strs"):
        result["token_strs"] = token_strs(text)
    return web.json_response(result)


async def _metrics(request: web.Request) -> web.Response:
    registry = request.app[_STATE].metrics.registry
    headers = {"Content-Type": CONTENT_TYPE_LATEST}
    return web.Response(body=generate_latest(registry), headers=headers)


async def _ground_truth_one(request: web.Request) -> web.Response:
    response_id = request.match_info["id"]
    record = request.app[_STATE].store.get(response_id)
    if record is None:
        return _error(404, f"no ground truth kept for id {response_id!r}", kind="not_found")
    return web.json_response(record.to_json())


async def _ground_truth_query(request: web.Request) -> web.Response:
    """``{"ids": [...]}`` -> ``{"records": {id: record}, "missing": [ids]}``."""
    try:
        body = parse_json_object(await _read_body(request))
        ids = body.get("ids")
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise BadRequest("'ids' must be a list of strings", "ids")
    except ApiError as exc:
        return _refusal(exc)
    return web.json_response(request.app[_STATE].store.query(ids))


def _drill_answer(request: web.Request, window: FaultWindow) -> web.Response:
    """A drill window's answer to a request it catches (drill.py): an error status, or
    the connection reset."""
    if window.kind == "reset":
        reset_connection(request.transport.get_extra_info("socket") if request.transport else None)
        if request.transport is not None:
            request.transport.abort()
        raise asyncio.CancelledError  # nothing more to write: the connection is gone
    response = _error(window.status, "synthetic drill: injected error", kind="server_error")
    if window.status == 429:
        response.headers["Retry-After"] = "1"
    return response


async def _drill_fault(request: web.Request) -> web.Response:
    state = request.app[_STATE]
    try:
        window = parse_window(parse_json_object(await request.read()), state.clock_ns())
    except DrillRequestError as exc:
        return _refusal(BadRequest(str(exc), "drill"))
    except ApiError as exc:
        return _refusal(exc)
    state.drill.open(window)
    return web.json_response({"kind": window.kind, "until_ns": window.until_ns})
