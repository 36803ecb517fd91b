"""Both targets' wire variants over real loopback HTTP: the bytes each switch changes.

The synthetic server runs in this test's event loop; the reference server as
``python -m moeperf.targets.serving`` with its switches in ``--config``, as the harness starts it.
The whole path through ``moeperf run`` is tests/e2e/test_wire_variants.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest

from moeperf.targets.ready_line import ReadyChild
from moeperf.targets.synthetic import SyntheticConfig, start

REPO_ROOT = Path(__file__).resolve().parents[2]
MESSAGES = [{"role": "user", "content": "say five words"}]
BOTH_USAGES = {"include_usage": True, "continuous_usage_stats": True}


def events(raw: bytes) -> list[Any]:
    """The SSE payloads of a body, JSON decoded ([DONE] stays the string "[DONE]")."""
    payloads = [event.removeprefix(b"data: ") for event in raw.split(b"\n\n") if event]
    return ["[DONE]" if p == b"[DONE]" else json.loads(p) for p in payloads]


async def synthetic_post(
    config: SyntheticConfig, body: dict, path: str = "/v1/chat/completions"
) -> tuple[int, bytes, dict | None]:
    """POST ``body`` to a fresh synthetic server: status, raw body, ground truth."""
    server = await start(config)
    try:
        async with aiohttp.ClientSession() as session:
            async with session.post(server.url + path, json=body) as response:
                status, raw = response.status, await response.read()
                response_id = response.headers.get("X-Request-Id")
            if response_id is None:
                return status, raw, None
            async with session.get(f"{server.url}/ground_truth/{response_id}") as answer:
                return status, raw, await answer.json()
    finally:
        await server.close()


def synthetic(config: SyntheticConfig, body: dict, path: str = "/v1/chat/completions"):
    return asyncio.run(synthetic_post(config, body, path))


def test_synthetic_end_only_no_done_role_first_like_transformers_serve():
    config = SyntheticConfig(ttft_s=0.02, itl_s=0.002, send_done=False, usage="end_only")
    body = {"messages": MESSAGES, "max_tokens": 5, "stream": True, "stream_options": BOTH_USAGES}
    status, raw, truth = synthetic(config, body)
    assert status == 200 and truth is not None
    chunks = events(raw)
    assert "[DONE]" not in chunks  # the stream just ends after the finish_reason chunk
    role, *tokens = chunks
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert len(tokens) == 5 and tokens[-1]["choices"][0]["finish_reason"] == "length"
    # continuous_usage_stats was asked for; end_only puts usage on the last chunk alone.
    assert [("usage" in chunk) for chunk in chunks] == [False] * 5 + [True]
    assert tokens[-1]["usage"]["completion_tokens"] == 5
    # The role chunk carries no token: the ground truth starts at the first real one.
    assert truth["chunk_tokens"] == [1] * 5 and truth["status"] == "ok"
    assert truth["chunk_write_ns"][0] - truth["received_ns"] >= 0.02e9


def test_synthetic_without_usage_or_role_chunk_like_old_llamacpp():
    config = SyntheticConfig(ttft_s=0.01, itl_s=0.001, usage="never", role_chunk=False)
    body = {"messages": MESSAGES, "max_tokens": 3, "stream": True, "stream_options": BOTH_USAGES}
    status, raw, truth = synthetic(config, body)
    chunks = events(raw)
    assert status == 200 and chunks[-1] == "[DONE]"
    assert len(chunks) == 4 and all("usage" not in chunk for chunk in chunks[:-1])
    assert chunks[0]["choices"][0]["delta"]["content"]  # the first chunk is a token
    assert truth is not None and truth["chunk_tokens"] == [1] * 3
    # Not even a whole body says how many tokens it has.
    status, raw, _ = synthetic(config, {"prompt": "a b", "max_tokens": 3}, "/v1/completions")
    assert status == 200 and "usage" not in json.loads(raw)


def test_synthetic_strict_variant_refuses_unknown_fields_with_422():
    config = SyntheticConfig(ttft_s=0.01, itl_s=0.001, reject_unknown_fields=True)
    body = {"messages": MESSAGES, "max_tokens": 3, "stream": True, "top_k": 1}
    status, raw, truth = synthetic(config, {**body, "stream_options": BOTH_USAGES})
    assert status == 422 and truth is None
    locations = [entry["loc"] for entry in json.loads(raw)["detail"]]
    assert locations == [["body", "top_k"], ["body", "stream_options", "continuous_usage_stats"]]
    del body["top_k"]
    status, raw, _ = synthetic(config, {**body, "stream_options": {"include_usage": True}})
    assert status == 200 and events(raw)[-1] == "[DONE]"


# --- the reference target ----------------------------------------------------------------


@pytest.fixture(scope="module")
def strict_reference(reference_target: Callable[..., ReadyChild]) -> ReadyChild:
    """No [DONE], no usage, no role chunk, unknown fields refused."""
    config = {"send_done": False, "usage": "never", "role_chunk": False}
    config["reject_unknown_fields"] = True
    return reference_target(config)


@pytest.mark.slow
def test_reference_variant_streams_tokens_only_and_refuses_unknown_fields(strict_reference):
    url = f"{strict_reference.url}/v1/chat/completions"
    body = {"messages": MESSAGES, "max_tokens": 6, "temperature": 0, "stream": True}
    refused = httpx.post(url, json={**body, "ignore_eos": True}, timeout=60)
    assert refused.status_code == 422
    assert refused.json()["detail"][0]["loc"] == ["body", "ignore_eos"]
    answer = httpx.post(url, json={**body, "stream_options": {"include_usage": True}}, timeout=60)
    assert answer.status_code == 200
    chunks = events(answer.content)
    assert "[DONE]" not in chunks
    assert all("usage" not in chunk for chunk in chunks)
    assert "role" not in chunks[0]["choices"][0]["delta"]
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    whole = httpx.post(url, json={**body, "stream": False}, timeout=60)
    assert whole.status_code == 200 and "usage" not in whole.json()
