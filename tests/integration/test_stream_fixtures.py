"""Streams as real servers send them (tests/data/streams/), through the harness's real client.

A loopback aiohttp server answers each request with a fixture's bytes, written in pieces
that split events (and UTF-8 characters) across reads; ``stream_request`` reads them over a
real ``aiohttp.ClientSession``. The expected values are in ``CASES``: what each server's
stream must become in the request record.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from loopback import serving

from moeperf.collectors.records import ChunkTokensSource, RequestRecord, StreamEnd
from moeperf.suites.serving.load.client import StreamResult, stream_request
from moeperf.suites.serving.load.openai_api import ENDPOINTS, Api, request_body

STREAMS = Path(__file__).resolve().parents[1] / "data" / "streams"
# Writes per response, and the pause between them, so the client reads them apart.
PIECES = 7
PIECE_GAP_S = 0.002
REJECTED = {"error": {"message": "Unrecognized request argument supplied: ignore_eos"}}


@dataclass(frozen=True)
class Case:
    fixture: str
    api: Api
    status: str
    stream_end: StreamEnd | None
    chunk_tokens: list[int]
    source: ChunkTokensSource
    output_tokens: int | None
    # Index of the chunk that carries the first generated token (the TTFT chunk).
    first_token_chunk: int
    text: str


CASES = [
    # Captured from vLLM 0.32.0 drafting with n-grams: one step gave two tokens.
    Case(
        "vllm_chat_continuous_usage", "chat", "ok", "done", [0, *[1] * 11, 2, 1, 1, 1, 0],
        "usage_stats", 16, 1, "\nReturn a list of the given string.\n\nReturn the number of the",
    ),
    Case(
        "sglang_chat", "chat", "ok", "done", [0, 1, 1, 1, 1, 1, 1, 0],
        "assumed_one", 8, 1, "The capital of France is Paris.",
    ),
    Case(
        "tgi_chat", "chat", "ok", "done", [1, 1, 1, 1, 1, 1],
        "assumed_one", 6, 0, "Deep learning is a subset of",
    ),
    Case(
        "llamacpp_chat", "chat", "ok", "done", [0, 1, 1, 1, 1, 0],
        "assumed_one", 5, 1, "Hello! How can",
    ),
    Case(
        "transformers_serve_chat", "chat", "ok", "finish_reason", [0, *[1] * 8, 0],
        "assumed_one", 8, 1, ">>> turtle.is_t.s",
    ),
    Case(
        "truncated_no_done_no_finish", "chat", "error", None, [0, 1, 1, 1],
        "assumed_one", None, 1, "The answer is",
    ),
    Case(
        "vllm_reasoning_content", "chat", "ok", "done", [0, 1, 1, 1, 1, 1, 0, 0],
        "assumed_one", 9, 1, "Okay, a greeting.Hello!",
    ),
    Case(
        "vllm_tool_calls", "chat", "ok", "done", [0, 1, 1, 1, 1, 0, 0],
        "assumed_one", 14, 1, 'get_weather{"city": "Paris"}',
    ),
    Case(
        "content_parts", "chat", "ok", "done", [0, 1, 1, 1, 0],
        "assumed_one", 5, 1, "Bonjour le monde !",
    ),
    Case(
        "usage_absent_crlf", "chat", "ok", "done", [0, 1, 1, 1, 1, 0],
        "assumed_one", None, 1, " Sure. Here it",
    ),
    # Captured from vLLM 0.32.0 drafting with n-grams: accepted drafts, 4 tokens a chunk.
    Case(
        "vllm_completions_logprobs", "completions", "ok", "done", [1, 1, 1, 1, 1, 1, 4, 4, 2, 0],
        "logprobs", 16, 0, " is" + " used to be" * 5,
    ),
]  # fmt: skip


def test_every_fixture_has_a_case_and_a_readme_entry():
    files = sorted(p.stem for p in STREAMS.glob("*.sse"))
    assert files == sorted(case.fixture for case in CASES)
    readme = (STREAMS / "README.md").read_text(encoding="utf-8")
    assert all(f"`{name}.sse`" in readme for name in files)


async def _answer(request: web.Request) -> web.StreamResponse:
    """The fixture named by the request's model, in PIECES writes; or a 400 that rejects
    a field, for the model "reject"."""
    name = (await request.json())["model"]
    if name == "reject":
        return web.json_response(REJECTED, status=400)
    data = (STREAMS / f"{name}.sse").read_bytes()
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    edges = [len(data) * i // PIECES for i in range(PIECES + 1)]
    for start, end in itertools.pairwise(edges):
        await response.write(data[start:end])
        await asyncio.sleep(PIECE_GAP_S)
    return response


@pytest.fixture
async def base_url() -> AsyncIterator[str]:
    async with serving(dict.fromkeys(ENDPOINTS.values(), _answer)) as url:
        yield url


async def send(base_url: str, api: Api, model: str) -> StreamResult:
    record = RequestRecord(
        request_id="r", scenario="s", phase="measure", worker=0,
        intended_send_ns=0, send_ns=0, done_ns=0, status="cancelled",
    )  # fmt: skip
    body = request_body(api, model, "p", 8, continuous_usage=True, ignore_eos=True)
    timeout = aiohttp.ClientTimeout(total=30, sock_read=10)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        return await stream_request(
            session, base_url + ENDPOINTS[api], api, body, record, time.monotonic_ns, 0
        )


@pytest.mark.parametrize("case", CASES, ids=[case.fixture for case in CASES])
async def test_a_real_servers_stream_is_recorded_exactly(base_url: str, case: Case):
    result = await send(base_url, case.api, case.fixture)
    record = result.record
    assert record.status == case.status, record.error_message
    assert record.stream_end == case.stream_end
    assert record.chunk_tokens == case.chunk_tokens
    assert record.chunk_tokens_source == case.source
    assert record.output_tokens == case.output_tokens
    assert "".join(result.texts) == case.text
    # TTFT is the first chunk with a generated token, never the role chunk before it.
    assert record.first_token_ns == record.chunk_ns[case.first_token_chunk]
    last = max(i for i, n in enumerate(case.chunk_tokens) if n > 0)
    assert record.last_token_ns == record.chunk_ns[last]
    # Unknown counts are left to the tokenizer after the level.
    assert result.counts_unknown == (case.source == "assumed_one")


async def test_a_truncated_stream_keeps_its_type_and_says_what_was_missing(base_url: str):
    record = (await send(base_url, "chat", "truncated_no_done_no_finish")).record
    assert record.error_type == "stream_truncated"
    assert record.error_message is not None and "finish_reason" in record.error_message


async def test_a_rejected_field_names_the_spec_switch_that_stops_it(base_url: str):
    record = (await send(base_url, "chat", "reject")).record
    assert (record.status, record.error_type, record.http_status) == ("error", "http_4xx", 400)
    assert record.error_message is not None
    assert record.error_message.startswith(
        "the target rejected 'ignore_eos' (HTTP 400); set target.ignore_eos = false; HTTP 400:"
    )
    assert "Unrecognized request argument supplied" in record.error_message
