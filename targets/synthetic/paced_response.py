"""A planned generation response written at its deadlines: streamed chunk by chunk, or
whole, each write stamped into the request's ground-truth record.

Apart from ``generation.py`` (acceptance, planning, the stream slot): this is what the
ground truth times, the writes and the deadlines they wait for.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from aiohttp import web

from moeperf.targets.openai_wire import DONE_EVENT, StreamShape
from moeperf.targets.synthetic.ground_truth import GroundTruthRecord
from moeperf.targets.synthetic.openai_format import MALFORMED_EVENT, MALFORMED_JSON, ChunkEncoder
from moeperf.targets.synthetic.openai_request import GenerationRequest
from moeperf.targets.synthetic.plan import NS_PER_S, RequestPlan
from moeperf.targets.synthetic.state import ClockNs, ServerState

_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
# The shortest wait before a write: the event loop's timer resolution.
_MIN_WAIT_NS = 1_000_000


@dataclass(frozen=True)
class Job:
    """A planned generation request: what was asked, how it is answered, its record.

    ``dequeued_ns`` is when it got its stream slot: the plan's deadlines count from it.
    """

    gen: GenerationRequest
    plan: RequestPlan
    record: GroundTruthRecord
    shape: StreamShape
    dequeued_ns: int


async def stream(request: web.Request, state: ServerState, job: Job) -> web.StreamResponse:
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


async def whole(request: web.Request, state: ServerState, job: Job) -> web.StreamResponse:
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


def _encoder(state: ServerState, job: Job) -> ChunkEncoder:
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
    # Never early: uvloop's timers have millisecond resolution and can fire up to about a
    # millisecond early, so the wait goes on until the deadline has passed, in waits of at
    # least a millisecond. A write is late by up to about that much, and its record stamps
    # when it was written: the ground truth is the stamp, not the deadline. (Spinning out
    # the last millisecond, yielding to the loop, met the deadline to the microsecond but
    # cost about half a core at 8 streams of 5 ms tokens, 7.6 against 2.3 CPU-s in a 10 s
    # level: taken from the client under calibration on the same host.)
    while (remaining_ns := due_ns - clock_ns()) > 0:
        await asyncio.sleep(max(remaining_ns, _MIN_WAIT_NS) / NS_PER_S)


def _close_connection(request: web.Request) -> None:
    # close(), not abort(): what was written is flushed, then FIN, with no final chunk of
    # the chunked encoding (or fewer bytes than Content-Length), so the client sees an
    # incomplete body. aiohttp's own write_eof afterwards fails quietly (ConnectionError).
    transport = request.transport
    if transport is not None:
        transport.close()
