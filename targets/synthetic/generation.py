"""The generation endpoints (/v1/chat/completions, /v1/completions): a request read and
checked, planned on acceptance, given a stream slot, then answered (``paced_response.py``).

Apart from ``server.py``, which only assembles the app: this is where a request's ground
truth record is made and its fate (status, faults, drills) decided.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from moeperf.targets.openai_wire import ApiError
from moeperf.targets.synthetic.drill import FaultWindow, reset_connection
from moeperf.targets.synthetic.first_bytes import FIRST_READ_NS
from moeperf.targets.synthetic.ground_truth import GroundTruthRecord
from moeperf.targets.synthetic.http_edge import error_response, read_body, refusal
from moeperf.targets.synthetic.openai_request import (
    GenerationRequest,
    parse_generation,
    parse_json_object,
)
from moeperf.targets.synthetic.paced_response import Job, stream, whole
from moeperf.targets.synthetic.plan import NS_PER_S, RequestPlan, malformed, plan_request
from moeperf.targets.synthetic.state import STATE, ServerState


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, chat=True)


async def completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, chat=False)


async def _generate(request: web.Request, *, chat: bool) -> web.StreamResponse:
    state = request.app[STATE]
    handler_ns = state.clock_ns()
    # Its first bytes' read (first_bytes.py); the handler's start where that is unknown.
    first_read_ns = FIRST_READ_NS.get()
    received_ns = handler_ns if first_read_ns is None else first_read_ns
    metrics = state.metrics
    record: GroundTruthRecord | None = None
    try:
        try:
            raw = await read_body(request)
            body_read_ns = state.clock_ns()  # the upload done, before any parsing
            body = parse_json_object(raw)
            state.wire.check_fields(body, chat=chat)
            gen = parse_generation(
                body,
                chat=chat,
                model=state.config.model,
                default_output_tokens=state.config.default_output_tokens,
            )
        except ApiError as exc:
            return refusal(exc)
        window = state.drill.active()
        if window is not None and window.kind != "malformed":
            state.drill.hit()
            return _drill_answer(request, window)
        # Drawn on acceptance, before any queue wait: the n-th request accepted keeps the
        # n-th plan whatever the stream limit.
        index = next(state.indices)
        plan = plan_request(state.config, index, gen.output_tokens)
        if window is not None and plan.fault is None:
            plan = malformed(plan)
            state.drill.hit()
        record = GroundTruthRecord(
            id=f"{'chatcmpl' if chat else 'cmpl'}-{index}",
            stream=gen.stream,
            received_ns=received_ns,
            body_read_ns=body_read_ns,
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
    state: ServerState,
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
        response = error_response(
            500, "synthetic fault: injected server error", kind="server_error"
        )
        response.headers["X-Request-Id"] = record.id
        return response
    shape = state.wire.shape(
        chat=gen.chat, include_usage=gen.include_usage, continuous_usage=gen.continuous_usage
    )
    job = Job(gen, plan, record, shape, dequeued_ns)
    # A client that stops reading stalls a write for good (aiohttp's drain has no
    # timeout): past its plan's end by write_timeout_s, the response is given up.
    late_s = (dequeued_ns + plan.due_ns[-1] - state.clock_ns()) / NS_PER_S
    try:
        async with asyncio.timeout(late_s + state.config.write_timeout_s):
            if gen.stream:
                return await stream(request, state, job)
            return await whole(request, state, job)
    except TimeoutError:
        if request.transport is not None:
            request.transport.abort()  # not close(): that waits for the unread bytes
        raise asyncio.CancelledError from None  # the connection is gone: "cancelled"


def _drill_answer(request: web.Request, window: FaultWindow) -> web.Response:
    """A drill window's answer to a request it catches (drill.py): an error status, or
    the connection reset."""
    if window.kind == "reset":
        reset_connection(request.transport.get_extra_info("socket") if request.transport else None)
        if request.transport is not None:
            request.transport.abort()
        raise asyncio.CancelledError  # nothing more to write: the connection is gone
    response = error_response(window.status, "synthetic drill: injected error", kind="server_error")
    if window.status == 429:
        response.headers["Retry-After"] = "1"
    return response
