"""The reference target's hardening, piece by piece, without a server: ``HttpGuard`` over
a fake ASGI exchange, and the sampler and validation at float32's edges.

The same behaviours over real sockets: tests/integration/test_server_hardening_reference.py.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import torch

from moeperf.targets.serving.engine.api import EngineConfig, InvalidRequestError, SamplingParams
from moeperf.targets.serving.engine.sampler import sample, sampling_probs
from moeperf.targets.serving.engine.validation import MIN_TEMPERATURE, validate_request
from moeperf.targets.serving.http_limits import (
    BodyReadTimeout,
    HttpGuard,
    HttpLimits,
    Message,
    PayloadTooLarge,
    WriteTimeout,
)

LIMITS = HttpLimits(max_body_bytes=100, body_read_timeout_s=0.05, write_timeout_s=0.05)


def scope(content_length: int | None = None) -> dict[str, Any]:
    headers = [] if content_length is None else [(b"content-length", str(content_length).encode())]
    return {"type": "http", "method": "POST", "path": "/v1/completions", "headers": headers}


class Exchange:
    """The server's side of one request: body messages to hand out, what was sent."""

    def __init__(self, *bodies: bytes, then_block: bool = False) -> None:
        self.messages = [
            {"type": "http.request", "body": b, "more_body": i < len(bodies) - 1 or then_block}
            for i, b in enumerate(bodies)
        ]
        self.then_block = then_block
        self.sent: list[Message] = []

    async def receive(self) -> Message:
        if self.messages:
            return self.messages.pop(0)
        await asyncio.Event().wait()  # a client that sends nothing more
        raise AssertionError("unreachable")

    async def send(self, message: Message) -> None:
        self.sent.append(message)


async def reading_app(scope: Any, receive: Any, send: Any) -> None:
    """Reads the whole body, answers 200 with its length; an ApiError becomes its status
    (as the real app's handlers do)."""
    from moeperf.targets.openai_wire import ApiError

    try:
        size = 0
        while True:
            message = await receive()
            size += len(message.get("body", b""))
            if not message.get("more_body"):
                break
        status, body = 200, str(size).encode()
    except ApiError as exc:
        status, body = exc.status, exc.body()
    await send({"type": "http.response.start", "status": status, "headers": []})
    await send({"type": "http.response.body", "body": body})


def status_and_headers(exchange: Exchange) -> tuple[int, list[tuple[bytes, bytes]]]:
    start = exchange.sent[0]
    return start["status"], list(start["headers"])


async def test_a_declared_length_over_the_limit_is_refused_without_calling_the_app() -> None:
    called = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        called.append(True)

    exchange = Exchange(b"")
    await HttpGuard(app, LIMITS)(scope(101), exchange.receive, exchange.send)
    status, headers = status_and_headers(exchange)
    assert (status, called) == (413, [])
    assert (b"connection", b"close") in headers
    error = json.loads(exchange.sent[1]["body"])["error"]
    assert "100 bytes" in error["message"] and "max_body_bytes" in error["message"]


async def test_a_body_at_the_limit_is_read_and_one_past_it_is_refused() -> None:
    exchange = Exchange(b"x" * 60, b"x" * 40)
    await HttpGuard(reading_app, LIMITS)(scope(), exchange.receive, exchange.send)
    assert status_and_headers(exchange)[0] == 200 and exchange.sent[1]["body"] == b"100"

    exchange = Exchange(b"x" * 60, b"x" * 41)  # chunked: no Content-Length to refuse early
    await HttpGuard(reading_app, LIMITS)(scope(), exchange.receive, exchange.send)
    status, headers = status_and_headers(exchange)
    assert status == PayloadTooLarge.status and (b"connection", b"close") in headers


async def test_a_body_that_stops_arriving_times_out_with_408_and_close() -> None:
    exchange = Exchange(b"{", then_block=True)
    await HttpGuard(reading_app, LIMITS)(scope(50), exchange.receive, exchange.send)
    status, headers = status_and_headers(exchange)
    assert status == BodyReadTimeout.status == 408
    assert (b"connection", b"close") in headers
    assert "body_read_timeout_s" in json.loads(exchange.sent[1]["body"])["error"]["message"]


async def test_once_the_body_is_in_reads_have_no_deadline() -> None:
    # After the body, a read waits for the client to leave: as long as it takes.
    exchange = Exchange(b"{}")
    waited = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        with pytest.raises(TimeoutError):  # our own, longer timeout: not the guard's 408
            await asyncio.wait_for(receive(), LIMITS.body_read_timeout_s * 4)
        waited.append(True)

    await HttpGuard(app, LIMITS)(scope(2), exchange.receive, exchange.send)
    assert waited == [True]


class StalledTransport:
    def __init__(self) -> None:
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True

    def is_closing(self) -> bool:
        return self.aborted


class ServerCycle:
    """Stands for uvicorn's request cycle: its ``send`` blocks (a client not reading)."""

    def __init__(self) -> None:
        self.transport = StalledTransport()
        self.sent: list[Message] = []

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.body" and self.sent:
            await asyncio.Event().wait()  # drain() that never returns
        self.sent.append(message)


async def streaming_app(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
    await send({"type": "http.response.body", "body": b"data: 2\n\n", "more_body": True})


async def test_a_stalled_write_aborts_the_connection() -> None:
    cycle = ServerCycle()
    exchange = Exchange(b"")
    await HttpGuard(streaming_app, LIMITS)(scope(0), exchange.receive, cycle.send)
    assert cycle.transport.aborted
    # The stalled write never completed; the app went on (a real server's sends are
    # no-ops once it knows the client gone) and the guard returned, no exception.
    assert [m["type"] for m in cycle.sent] == ["http.response.start"]


async def test_a_stalled_write_without_a_transport_to_abort_raises() -> None:
    async def stalling_send(message: Message) -> None:
        if message["type"] == "http.response.body":
            await asyncio.Event().wait()

    exchange = Exchange(b"")
    with pytest.raises(WriteTimeout, match="write_timeout_s"):
        await HttpGuard(streaming_app, LIMITS)(scope(0), exchange.receive, stalling_send)


# -- sampling at float32's edges (found by schemathesis: HTTP 500, every request failed) --


def test_a_top_p_below_float32s_range_keeps_the_most_likely_token() -> None:
    logits = torch.tensor([[0.0, 3.0, 1.0]])
    probs = sampling_probs(logits, SamplingParams(temperature=1.0, top_p=5e-324))
    assert probs.tolist() == [[0.0, 1.0, 0.0]]
    generator = torch.Generator().manual_seed(0)
    assert sample(logits, SamplingParams(temperature=1.0, top_p=5e-324), generator) == [1]


def test_the_engine_refuses_a_temperature_too_small_to_divide_by() -> None:
    params = SamplingParams(temperature=MIN_TEMPERATURE / 2, max_tokens=1)
    with pytest.raises(InvalidRequestError, match="temperature must be 0"):
        validate_request(EngineConfig(), 100, [1, 2], params)
    validate_request(EngineConfig(), 100, [1, 2], SamplingParams(temperature=MIN_TEMPERATURE))
