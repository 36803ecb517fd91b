"""The client's per-chunk hot path on one 256-token streamed chat completion.

Component by component (SSE splitting, chunk JSON parsing) and whole: the real
``suites.serving.load.client.stream_request`` reading from a stand-in transport that hands it
the response's bytes at once, so what is timed is the client's own work per chunk
(clock reads, SSE, JSON, the record), not a network. The whole path also runs one event
loop per response; ``test_event_loop_round`` times that alone, to subtract.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import cast

import aiohttp
import pytest
from micro_inputs import RESPONSE_TOKENS

from moeperf.collectors.records import RequestRecord
from moeperf.suites.serving.load.client import stream_request
from moeperf.suites.serving.load.openai_api import parse_chunk
from moeperf.suites.serving.load.sse import SSEParser

# Role chunk, one chunk per token, the usage-only chunk, [DONE].
PAYLOADS = RESPONSE_TOKENS + 3


@pytest.mark.benchmark(group="client")
def test_sse_parser(benchmark, pieces: list[bytes]) -> None:
    def parse() -> int:
        parser = SSEParser()
        count = 0
        for piece in pieces:
            count += len(parser.feed(piece))
        return count

    assert benchmark(parse) == PAYLOADS


@pytest.mark.benchmark(group="client")
def test_parse_chunks(benchmark, events: list[bytes]) -> None:
    payloads = [p for e in events for p in SSEParser().feed(e) if p != b"[DONE]"]

    def parse() -> int:
        tokens = 0
        for payload in payloads:
            chunk = parse_chunk("chat", json.loads(payload))
            tokens += chunk.text != ""
        return tokens

    assert benchmark(parse) == RESPONSE_TOKENS


class _Content:
    def __init__(self, pieces: list[bytes]):
        self._pieces = pieces

    async def iter_any(self) -> AsyncIterator[bytes]:
        for piece in self._pieces:
            yield piece


class _Response:
    status = 200
    headers = {"Content-Type": "text/event-stream"}  # noqa: RUF012

    def __init__(self, pieces: list[bytes]):
        self.content = _Content(pieces)

    async def __aenter__(self) -> _Response:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


class _Session:
    """The part of ``aiohttp.ClientSession`` that ``stream_request`` uses."""

    def __init__(self, pieces: list[bytes]):
        self._pieces = pieces

    def post(self, url: str, json: dict) -> _Response:
        return _Response(self._pieces)


def _records() -> Iterator[RequestRecord]:
    n = 0
    while True:
        n += 1
        yield RequestRecord(f"req-{n}", "c=32", "measure", 0, 0, 0, 0, "ok")


@pytest.mark.benchmark(group="client")
def test_stream_request(benchmark, pieces: list[bytes]) -> None:
    # The stand-in has only the part of a ClientSession that stream_request uses.
    session = cast(aiohttp.ClientSession, _Session(pieces))
    records = _records()
    loop = asyncio.new_event_loop()
    clock = time.monotonic_ns
    anchor = clock()

    def one_response() -> RequestRecord:
        coro = stream_request(
            session, "/v1/chat/completions", "chat", {}, next(records), clock, anchor
        )
        return loop.run_until_complete(coro).record

    try:
        record = benchmark(one_response)
    finally:
        loop.close()
    assert record.status == "ok", record.error_message
    assert sum(record.chunk_tokens) == RESPONSE_TOKENS
    assert record.chunk_tokens_source == "usage_stats"


@pytest.mark.benchmark(group="client")
def test_event_loop_round(benchmark) -> None:
    """One ``run_until_complete`` of a coroutine that does nothing: the overhead above."""
    loop = asyncio.new_event_loop()

    async def nothing() -> None:
        return None

    try:
        benchmark(lambda: loop.run_until_complete(nothing()))
    finally:
        loop.close()
