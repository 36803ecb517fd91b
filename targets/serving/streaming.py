"""From the engine's outputs to a response: the SSE events of a streamed request, or the
body of a whole one, and the request's end (aborted in the engine, counted in metrics).

The engine calls back from its own thread with each step's new tokens; ``EngineStream``
hands them to the event loop. Each engine output becomes exactly one chunk, so a
multi-token MTP step is visible as one chunk of several tokens. What a stream sends
besides its tokens (role chunk, where usage goes, ``[DONE]``) is the request's
``StreamShape``, decided by the server's ``WireVariant`` (``targets/openai_wire.py``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fastapi import Request
from fastapi.responses import Response

from moeperf.targets.openai_wire import (
    DONE_EVENT,
    BadRequest,
    StreamShape,
    WireVariant,
    error_body,
    sse_event,
)
from moeperf.targets.serving.engine.api import InvalidRequestError, QueueFullError, RequestOutput
from moeperf.targets.serving.errors import Overloaded, error_response
from moeperf.targets.serving.metrics import ReferenceMetrics
from moeperf.targets.serving.openai_request import GenerationJob, ServedModel
from moeperf.targets.serving.openai_response import Delta, ResponseWriter, TextAssembler

if TYPE_CHECKING:
    from moeperf.targets.serving.engine.loop import EngineLoop


@dataclass
class ServingState:
    """What every request of one app shares: the engine, the model, the metrics, and how
    its stream differs from vLLM's."""

    engine: EngineLoop
    served: ServedModel
    metrics: ReferenceMetrics
    wire: WireVariant


class EngineFailed(Exception):
    """The engine ended a request with finish reason "error"."""


class EngineStream:
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


def submit(state: ServingState, job: GenerationJob, stream: EngineStream) -> None:
    """Hand the job to the engine; what the engine refuses is an ``ApiError``."""
    try:
        state.engine.add_request(stream.request_id, job.prompt_ids, job.params, stream.on_output)
    except InvalidRequestError as exc:
        raise BadRequest(str(exc)) from None
    except QueueFullError as exc:
        raise Overloaded(f"{exc}; retry later") from None


async def engine_deltas(
    state: ServingState, job: GenerationJob, stream: EngineStream, received: float
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
            prompt_logprobs=output.prompt_logprobs,
        )
        if finish is not None:
            if finish != "abort":
                metrics.e2e.observe(now - received)
            return


def _abort(state: ServingState, stream: EngineStream) -> None:
    """Ask the engine to drop the request (it answers with a last, "abort" output)."""
    stream.finished = True
    state.engine.abort_request(stream.request_id)


class Outcome:
    """Ends a request once: aborts its engine request if still running, counts its status."""

    def __init__(self, state: ServingState, stream: EngineStream) -> None:
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


async def stream_events(
    shape: StreamShape,
    job: GenerationJob,
    writer: ResponseWriter,
    deltas: AsyncIterator[Delta],
    outcome: Outcome,
) -> AsyncIterator[bytes]:
    """A streamed response's SSE events, in ``shape`` (``[DONE]`` last, if it has one)."""
    # Starlette cancels this generator when the client disconnects (CancelledError at an
    # await): the finally block then aborts the engine request.
    status = "abort"
    last: Delta | None = None
    try:
        if shape.role_chunk:
            zero = Delta("", None, None, len(job.prompt_ids), 0, 0)
            yield writer.role_chunk(zero if shape.usage_every_chunk else None)
        async for delta in deltas:
            last = delta
            yield writer.chunk(delta, shape.usage_on(finished=delta.finish_reason is not None))
        status = _status(last.finish_reason if last else None)
        if shape.usage_chunk and last is not None:
            yield writer.usage_chunk(last)
        if shape.done:
            yield DONE_EVENT
    except EngineFailed as exc:
        status = "error"
        yield sse_event(error_body(str(exc), kind="server_error", code=500))
        if shape.done:
            yield DONE_EVENT
    finally:
        outcome.close(status)


async def whole(
    shape: StreamShape,
    request: Request,
    writer: ResponseWriter,
    deltas: AsyncIterator[Delta],
    outcome: Outcome,
    headers: dict[str, str],
) -> Response:
    """A whole response, once all deltas are in; 499 if the client left before that."""
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
        body = writer.body(collected, with_usage=shape.usage_in_body)
        return Response(body, media_type="application/json", headers=headers)
    finally:
        collecting.cancel()
        watching.cancel()
        outcome.close(status)


async def _disconnected(request: Request) -> None:
    # The body is already read, so the next ASGI message is the client leaving.
    while (await request.receive())["type"] != "http.disconnect":
        pass
