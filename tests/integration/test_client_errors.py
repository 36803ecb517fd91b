"""Misbehaving servers over loopback: each answer becomes a failed request with its type."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest
from aiohttp import web
from loopback import serving

from moeperf.collectors.records import RequestRecord
from moeperf.suites.serving.load.client import stream_request
from moeperf.suites.serving.load.openai_api import request_body

CHUNK = b'data: {"id":"x","choices":[{"text":"a"}]}\n\n'


async def _answer(request: web.Request) -> web.StreamResponse:
    kind = (await request.json())["model"]
    if kind == "json":
        return web.json_response({"choices": [{"text": "whole"}]})
    if kind == "text":
        return web.Response(text="<html>proxy error</html>", content_type="text/html")
    if kind in ("404", "503"):
        return web.json_response({"error": {"message": "no"}}, status=int(kind))
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    if kind == "early":
        await response.write(CHUNK)
        assert request.transport is not None
        request.transport.close()  # no [DONE], and the chunked body is cut
        return response
    if kind == "garbage":
        await response.write(CHUNK + b"data: {not json\n\n")
    elif kind == "error_event":
        await response.write(b'data: {"error": {"message": "engine died"}}\n\n')
    elif kind == "stall":
        await response.write(CHUNK)
        await asyncio.sleep(2)
    else:  # a well-formed stream
        await response.write(CHUNK + CHUNK + b"data: [DONE]\n\n")
    return response


@pytest.fixture
async def base_url():
    async with serving({"/v1/completions": _answer}) as url:
        yield url


async def send(url: str, kind: str, read_timeout_s: float = 10) -> RequestRecord:
    record = RequestRecord(
        request_id="r", scenario="s", phase="measure", worker=0,
        intended_send_ns=0, send_ns=0, done_ns=0, status="cancelled",
    )  # fmt: skip
    body = request_body("completions", kind, "p", 4, continuous_usage=False, ignore_eos=False)
    timeout = aiohttp.ClientTimeout(total=30, sock_read=read_timeout_s)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        await stream_request(
            session, url + "/v1/completions", "completions", body, record, time.monotonic_ns, 0
        )
    return record


@pytest.mark.parametrize(
    ("kind", "error_type", "http_status"),
    [
        ("json", "not_streaming", 200),
        ("text", "invalid_response", 200),
        ("404", "http_4xx", 404),
        ("503", "http_5xx", 503),
        ("early", "stream_truncated", 200),
        ("garbage", "malformed_chunk", 200),
        ("error_event", "server_error_event", 200),
    ],
)
async def test_bad_answers_are_typed_failures(base_url, kind, error_type, http_status):
    record = await send(base_url, kind)
    assert record.status == "error"
    assert record.error_type == error_type, record.error_message
    assert record.error_message
    assert record.http_status == http_status
    assert record.done_ns >= record.send_ns > 0


async def test_a_stall_longer_than_the_read_timeout_fails_the_request(base_url):
    record = await send(base_url, "stall", read_timeout_s=0.3)
    assert (record.status, record.error_type) == ("error", "stall_timeout")
    # What arrived before the stall is kept.
    assert record.chunk_tokens == [1]


async def test_a_good_stream_is_ok_with_assumed_counts(base_url):
    record = await send(base_url, "ok")
    assert record.status == "ok"
    assert record.chunk_tokens == [1, 1]
    assert record.chunk_tokens_source == "assumed_one"
    assert record.first_token_ns == record.chunk_ns[0]
    assert record.server_request_id == "x"


async def test_a_refused_connection_is_a_connect_error(unused_tcp_port):
    record = await send(f"http://127.0.0.1:{unused_tcp_port}", "ok")
    assert (record.status, record.error_type) == ("error", "connect_error")
