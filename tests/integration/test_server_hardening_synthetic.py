"""The synthetic target against hostile and broken clients, over real loopback HTTP.

The same treatment as the reference target's (test_server_hardening_reference.py): bounds
answered with a 4xx in OpenAI's error shape naming the limit, a body sent a byte at a time
cut off with 408 while it holds no stream slot, a stream never read given up
``write_timeout_s`` after its last chunk was due, its stream slot freed for the next
request. The synthetic target publishes no OpenAPI document, so instead of schemathesis
hypothesis throws arbitrary and nearly valid JSON bodies, and bytes that are not JSON, at
its POST routes: a 4xx in the error shape or a 200, never a 5xx.

The server runs on a uvloop thread with 2 s timeouts, a 1 MiB body limit and one stream
slot, and answers at once (``itl_s`` 0), so a stalled stream's deadline comes quickly.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import uvloop
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from raw_http import (
    parse_response,
    read_until_closed,
    request_head,
    slow_body,
    stalled_reader,
    wait_for,
)

from moeperf.targets.synthetic import SyntheticConfig, start
from moeperf.targets.synthetic.openai_request import (
    MAX_MODEL_LEN,
    MAX_STOP_STRINGS,
    parse_generation,
)

TIMEOUT_S = 2.0
MAX_BODY = 1024 * 1024
CONFIG = SyntheticConfig(
    ttft_s=0.005,
    itl_s=0.0,
    default_output_tokens=8,
    body_read_timeout_s=TIMEOUT_S,
    write_timeout_s=TIMEOUT_S,
    max_body_bytes=MAX_BODY,
    max_concurrent_streams=1,
)


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    loop = uvloop.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = asyncio.run_coroutine_threadsafe(start(CONFIG), loop).result(10)
    try:
        yield server.url
    finally:
        asyncio.run_coroutine_threadsafe(server.close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=30) as shared:
        yield shared


def port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def gauges(url: str) -> dict[str, float]:
    found = {}
    for line in httpx.get(f"{url}/metrics", timeout=30).text.splitlines():
        name, _, value = line.rpartition(" ")
        if name.startswith(("synthetic_requests_running", "synthetic_requests_waiting")) or (
            name.startswith("synthetic_requests_total{")
        ):
            found[name] = float(value)
    return found


def slots_free(url: str) -> bool:
    g = gauges(url)
    return g["synthetic_requests_running"] == 0 and g["synthetic_requests_waiting"] == 0


def assert_error(response: httpx.Response, status: int, *words: str) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == status
    for word in words:
        assert word in error["message"], error["message"]


# -- bounds -------------------------------------------------------------------------------


def test_a_declared_body_over_the_limit_is_refused_before_it_is_sent(url: str) -> None:
    with socket.create_connection(("127.0.0.1", port(url))) as sock:
        sock.sendall(request_head("/v1/completions", 10 * MAX_BODY))
        raw, ended = read_until_closed(sock, give_up_s=30)
    answer = parse_response(raw)
    assert answer.status == 413 and ended in ("eof", "reset")
    message = answer.json()["error"]["message"]
    assert str(MAX_BODY) in message and "max_body_bytes" in message


def test_a_chunked_body_over_the_limit_is_refused(url: str) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"prompt": "'
        for _ in range(2 * MAX_BODY // 1024):
            yield b"x" * 1024

    response = httpx.post(f"{url}/v1/completions", content=chunks(), timeout=30)
    assert_error(response, 413, str(MAX_BODY), "max_body_bytes")


def test_a_body_at_the_limit_is_served(url: str) -> None:
    body = {"prompt": "Hello", "max_tokens": 1, "user": ""}
    body["user"] = "u" * (MAX_BODY - len(json.dumps(body)))
    content = json.dumps(body).encode()
    assert len(content) == MAX_BODY
    response = httpx.post(f"{url}/v1/completions", content=content, timeout=30)
    assert response.status_code == 200, response.text


def test_prompt_and_output_beyond_the_context_are_refused(url: str) -> None:
    body = {"prompt": "two words", "max_tokens": MAX_MODEL_LEN}
    response = httpx.post(f"{url}/v1/completions", json=body, timeout=30)
    assert_error(response, 400, f"maximum context length is {MAX_MODEL_LEN} tokens")
    # Exactly the context fits (checked without serving a million tokens).
    fits = {**body, "max_tokens": MAX_MODEL_LEN - 2}
    gen = parse_generation(fits, chat=False, model="synthetic", default_output_tokens=8)
    assert gen.prompt_tokens + gen.output_tokens == MAX_MODEL_LEN


def test_stop_strings_are_bounded(url: str) -> None:
    stops = [f"s{i}" for i in range(MAX_STOP_STRINGS + 1)]
    body = {"prompt": "Hello", "max_tokens": 2}
    ok = httpx.post(f"{url}/v1/completions", json={**body, "stop": stops[:-1]}, timeout=30)
    assert ok.status_code == 200
    response = httpx.post(f"{url}/v1/completions", json={**body, "stop": stops}, timeout=30)
    assert_error(response, 400, f"at most {MAX_STOP_STRINGS}", f"got {MAX_STOP_STRINGS + 1}")


def test_json_nested_too_deep_is_a_400(url: str) -> None:
    # Python's json raises RecursionError (a RuntimeError, not a ValueError): it was a 500.
    body = b'{"prompt": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    for path in ("/v1/completions", "/tokenize", "/ground_truth/query"):
        response = httpx.post(f"{url}{path}", content=body, timeout=30)
        assert_error(response, 400, "nested too deeply")


# -- slow clients -------------------------------------------------------------------------


def test_a_body_sent_a_byte_at_a_time_is_cut_off_and_holds_no_slot(url: str) -> None:
    seen: list[dict[str, float]] = []
    outcome = slow_body(
        port(url),
        "/v1/chat/completions",
        interval_s=0.25,
        give_up_s=TIMEOUT_S + 30,
        while_sending=lambda: seen.append(gauges(url)),
    )
    assert outcome.closed, f"still open after {outcome.elapsed_s:.1f} s"
    answer = parse_response(outcome.answer)
    assert answer.status == 408 and answer.headers["connection"] == "close"
    assert "body_read_timeout_s" in answer.json()["error"]["message"]
    assert outcome.elapsed_s >= TIMEOUT_S * 0.95  # not before the deadline
    (during,) = seen
    assert during["synthetic_requests_running"] == 0
    assert during["synthetic_requests_waiting"] == 0
    print(f"slow body: closed {outcome.elapsed_s:.2f} s after the headers (408 sent first)")


def test_a_stream_never_read_is_given_up_and_frees_its_slot(url: str) -> None:
    assert wait_for(lambda: slots_free(url), 30)
    cancelled = 'synthetic_requests_total{status="cancelled"}'
    before = gauges(url)[cancelled]
    # 200,000 tokens, all due at once (itl_s 0): the writes stall within the first few
    # hundred KB, and would stay stalled for as long as the client does not read.
    body = {"prompt": "hi", "max_tokens": 200_000, "stream": True, "logprobs": 5}
    sock = stalled_reader(port(url), "/v1/completions", body)
    try:
        assert wait_for(lambda: gauges(url)["synthetic_requests_running"] == 1, 30)
        assert wait_for(lambda: slots_free(url), 60), gauges(url)
        assert gauges(url)[cancelled] == before + 1
        # The slot is really free: the next request is served (one slot in all).
        next_one = httpx.post(f"{url}/v1/completions", json={"prompt": "hi"}, timeout=30)
        assert next_one.status_code == 200
        data, ended = read_until_closed(sock)
        assert ended in ("eof", "reset"), f"the connection is still {ended}"
        assert data.startswith(b"HTTP/1.1 200") and b"data: [DONE]" not in data
    finally:
        sock.close()
    print(f"stalled reader: slot freed; {len(data)} bytes delivered before the abort")


# -- malformed bodies (the synthetic target has no OpenAPI document) ------------------------

_SMALL_INTS = st.integers(-10, 40)
_JSON = st.recursive(
    st.none() | st.booleans() | _SMALL_INTS | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
_MESSAGE = st.fixed_dictionaries(
    {},
    optional={
        "role": st.sampled_from(["user", "system", "assistant"]) | _JSON,
        "content": st.text(max_size=20)
        | st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": _JSON}))
        | _JSON,
    },
)
_FIELDS = {
    "model": st.just("synthetic") | _JSON,
    "prompt": st.text(max_size=30) | st.lists(st.text(max_size=5), max_size=2) | _JSON,
    "messages": st.lists(_MESSAGE | _JSON, max_size=3) | _JSON,
    # Valid outputs stay small (a valid 1,000,000 would stream for a while); the invalid
    # ones go past every limit.
    "max_tokens": _SMALL_INTS | st.integers(MAX_MODEL_LEN, 2**70) | _JSON,
    "max_completion_tokens": _SMALL_INTS | _JSON,
    "stream": st.booleans() | _JSON,
    "stream_options": st.fixed_dictionaries(
        {}, optional={"include_usage": _JSON, "continuous_usage_stats": _JSON}
    )
    | _JSON,
    "n": st.just(1) | _JSON,
    "logprobs": st.booleans() | _SMALL_INTS | _JSON,
    "stop": st.text(max_size=3) | st.lists(st.text(max_size=3), max_size=20) | _JSON,
    "ids": st.lists(st.text(max_size=10), max_size=3) | _JSON,
    "return_token_strs": _JSON,
}
_NEARLY_VALID = st.fixed_dictionaries({}, optional=_FIELDS)


def _encode(value: Any) -> bytes:
    return json.dumps(value, allow_nan=True).encode()  # NaN and Infinity: Python's json reads them


def _nested(depth: int) -> bytes:
    return b'{"prompt": ' + b"[" * depth + b"]" * depth + b"}"


_BODIES = st.one_of(
    _NEARLY_VALID.map(_encode),
    _JSON.map(_encode),
    st.binary(max_size=40),
    st.integers(1, 3000).map(_nested),  # Python's json recurses about 1000 deep
)
_ROUTES = st.sampled_from(
    ["/v1/completions", "/v1/chat/completions", "/tokenize", "/ground_truth/query"]
)


@settings(
    max_examples=300,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(route=_ROUTES, body=_BODIES)
def test_malformed_bodies_are_refused_with_a_4xx_never_a_5xx(
    url: str, client: httpx.Client, route: str, body: bytes
) -> None:
    headers = {"Content-Type": "application/json"}
    response = client.post(f"{url}{route}", content=body, headers=headers)
    assert response.status_code < 500, (route, body[:200], response.text)
    if response.status_code >= 400:
        error = response.json()["error"]
        assert error["code"] == response.status_code and isinstance(error["message"], str)
    elif response.headers["content-type"].startswith("application/json"):
        response.json()


def test_the_server_is_healthy_after_the_malformed_bodies(url: str) -> None:
    assert httpx.get(f"{url}/health", timeout=30).status_code == 200
    assert wait_for(lambda: slots_free(url), 30)
