"""The reference target against hostile and broken clients, over real loopback HTTP.

Bounds: a body over ``max_body_bytes`` (declared or chunked), too many stop strings or
stop token ids, a prompt that cannot fit the context: each a 4xx in OpenAI's error shape
whose message names the limit. Slow clients (raw sockets, ``raw_http.py``): one that sends
its body a byte at a time is answered 408 once ``body_read_timeout_s`` has passed, and
holds no engine request meanwhile; one that asks for a stream and never reads it is cut
off ``write_timeout_s`` after its write stalls, and the engine frees the request's batch
slot and KV blocks (read from the server's own /metrics) long before its max_tokens.

The server runs with a 2 s body timeout, a 1 s write timeout and a 1 MiB body limit, so
each wait is short.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from raw_http import (
    parse_response,
    read_until_closed,
    request_head,
    slow_body,
    stalled_reader,
    wait_for,
)

from moeperf.targets.ready_line import ReadyChild
from moeperf.targets.serving.openai_request import MAX_STOP_STRINGS, MAX_STOP_TOKEN_IDS
from moeperf.targets.serving.server import _json_or_none

pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 120.0
TIMEOUT_S = 2.0
# Short: the engine must still be generating when it fires (at about 1,000 tokens/s, a
# fast host's, the rest of max_tokens takes more than this).
WRITE_TIMEOUT_S = 1.0
MAX_BODY = 1024 * 1024
CONTEXT = 2048


@pytest.fixture(scope="module")
def server(reference_target: Callable[..., ReadyChild]) -> ReadyChild:
    config = {
        "seed": 0,
        "body_read_timeout_s": TIMEOUT_S,
        "write_timeout_s": WRITE_TIMEOUT_S,
        "max_body_bytes": MAX_BODY,
    }
    return reference_target(config)


def port(server: ReadyChild) -> int:
    return int(server.url.rsplit(":", 1)[1])


def gauges(server: ReadyChild) -> dict[str, float]:
    """The engine's own state, as its /metrics gives it."""
    names = (
        "reference_requests_running",
        "reference_requests_waiting",
        "reference_kv_cache_usage_ratio",
        "reference_generation_tokens_total",
        'reference_requests_total{status="abort"}',
    )
    found = {}
    for line in httpx.get(f"{server.url}/metrics", timeout=30).text.splitlines():
        name, _, value = line.rpartition(" ")
        if name in names:
            found[name] = float(value)
    assert set(found) == set(names), found
    return found


def idle(server: ReadyChild) -> bool:
    g = gauges(server)
    held = ("reference_requests_running", "reference_requests_waiting")
    return all(g[name] == 0 for name in held) and g["reference_kv_cache_usage_ratio"] == 0


def assert_error(response: httpx.Response, status: int, *words: str) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == status
    for word in words:
        assert word in error["message"], error["message"]


# -- bounds -------------------------------------------------------------------------------


def test_a_declared_body_over_the_limit_is_refused_before_it_is_sent(server) -> None:
    import socket

    with socket.create_connection(("127.0.0.1", port(server))) as sock:
        sock.sendall(request_head("/v1/completions", 10 * MAX_BODY))  # and no body at all
        raw, ended = read_until_closed(sock, give_up_s=30)
    answer = parse_response(raw)
    assert answer.status == 413 and ended in ("eof", "reset")
    assert answer.headers["connection"] == "close"
    message = answer.json()["error"]["message"]
    assert str(MAX_BODY) in message and "max_body_bytes" in message


def test_a_chunked_body_over_the_limit_is_refused(server) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"prompt": "'
        for _ in range(2 * MAX_BODY // 1024):
            yield b"x" * 1024

    response = httpx.post(f"{server.url}/v1/completions", content=chunks(), timeout=30)
    assert_error(response, 413, str(MAX_BODY), "max_body_bytes")


def test_a_body_just_under_the_limit_is_served(server) -> None:
    body = {"prompt": "Hello", "max_tokens": 1, "user": ""}
    body["user"] = "u" * (MAX_BODY - len(json.dumps(body)))
    content = json.dumps(body).encode()
    assert len(content) == MAX_BODY
    response = httpx.post(f"{server.url}/v1/completions", content=content, timeout=30)
    assert response.status_code == 200, response.text


def test_a_prompt_text_too_long_for_the_context_is_refused_before_tokenizing(server) -> None:
    # 200,000 characters cannot be 2048 tokens of this vocabulary (its longest token is
    # under 100 characters): refused without tokenizing, as the message says.
    prompt = "x" * 200_000
    for path, body in (
        ("/v1/completions", {"prompt": prompt}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": prompt}]}),
        ("/tokenize", {"prompt": prompt}),
    ):
        response = httpx.post(f"{server.url}{path}", json=body, timeout=30)
        assert_error(response, 400, f"maximum context length is {CONTEXT} tokens", "at least")


@pytest.mark.parametrize(
    ("field", "limit", "value"),
    [
        ("stop", MAX_STOP_STRINGS, lambda n: [f"s{i}" for i in range(n)]),
        ("stop_token_ids", MAX_STOP_TOKEN_IDS, lambda n: list(range(10, 10 + n))),
    ],
)
def test_stop_lists_are_bounded(server, field: str, limit: int, value) -> None:
    url = f"{server.url}/v1/completions"
    body = {"prompt": "Hello", "max_tokens": 2}
    assert httpx.post(url, json={**body, field: value(limit)}, timeout=60).status_code == 200
    response = httpx.post(url, json={**body, field: value(limit + 1)}, timeout=60)
    assert_error(response, 400, f"at most {limit}", f"got {limit + 1}")
    assert response.json()["error"]["param"] == field


@pytest.mark.parametrize("sampling", [{"top_p": 5e-324}, {"temperature": 5e-324}])
def test_vanishing_top_p_or_temperature_is_served(server, sampling) -> None:
    # schemathesis' find: float32 made top_p 0 (every token cut) and 1/temperature inf,
    # the draw NaN and the engine step failed, with every request in it (HTTP 500).
    body = {"prompt": "Hello", "max_tokens": 3, "seed": 1, **sampling}
    response = httpx.post(f"{server.url}/v1/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["completion_tokens"] >= 1


def test_json_nested_too_deep_is_a_400(server) -> None:
    body = b'{"prompt": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    response = httpx.post(f"{server.url}/v1/completions", content=body, timeout=30)
    assert_error(response, 400, "not valid JSON")
    # The strict variant parses the body twice, the first time with Python's json, which
    # raises RecursionError (not ValueError): it is left to the request parser.
    assert _json_or_none(b"[" * 100_000) is None


# -- slow clients -------------------------------------------------------------------------


def test_a_body_sent_a_byte_at_a_time_is_cut_off_and_holds_no_engine_request(server) -> None:
    seen_while_sending: list[dict[str, float]] = []
    outcome = slow_body(
        port(server),
        "/v1/completions",
        interval_s=0.25,
        give_up_s=TIMEOUT_S + 30,
        while_sending=lambda: seen_while_sending.append(gauges(server)),
    )
    assert outcome.closed, f"still open after {outcome.elapsed_s:.1f} s"
    answer = parse_response(outcome.answer)
    assert answer.status == 408 and answer.headers["connection"] == "close"
    assert "body_read_timeout_s" in answer.json()["error"]["message"]
    # Cut off by the deadline, not before it (a lower bound: a slow host only adds to it).
    assert outcome.elapsed_s >= TIMEOUT_S * 0.95
    assert outcome.body_bytes_sent >= 2
    # While it dribbled, the engine had nothing of it: no request running or waiting.
    (during,) = seen_while_sending
    assert during["reference_requests_running"] == 0
    assert during["reference_requests_waiting"] == 0
    print(f"slow body: 408 after {outcome.elapsed_s:.2f} s, {outcome.body_bytes_sent} bytes")


def test_a_stream_never_read_is_cut_off_and_frees_its_slot_and_kv_blocks(server) -> None:
    assert wait_for(lambda: idle(server), 30)
    before = gauges(server)
    max_tokens = CONTEXT - 64
    # Top-20 logprobs make each chat chunk about 2.5 KB, so the server's writes stall after
    # some tens of tokens, long before max_tokens.
    body = {
        "messages": [{"role": "user", "content": "The quick brown fox"}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
        "logprobs": True,
        "top_logprobs": 20,
    }
    started = time.monotonic()
    sock = stalled_reader(port(server), "/v1/chat/completions", body)
    try:
        assert wait_for(lambda: gauges(server)["reference_requests_running"] == 1, 30)
        # Aborted: the engine's request is gone, with its batch slot and KV blocks.
        assert wait_for(lambda: idle(server), 60), gauges(server)
        freed_after = time.monotonic() - started
        after = gauges(server)
        generated = (
            after["reference_generation_tokens_total"] - before["reference_generation_tokens_total"]
        )
        aborted = (
            after['reference_requests_total{status="abort"}']
            - before['reference_requests_total{status="abort"}']
        )
        # It ended by the abort, not by running to max_tokens.
        assert aborted == 1
        assert 0 < generated < max_tokens
        # The client's connection was dropped, mid-stream: no [DONE] in what it can read.
        data, ended = read_until_closed(sock)
        assert ended in ("eof", "reset"), f"the connection is still {ended}"
        assert data.startswith(b"HTTP/1.1 200") and b"data: [DONE]" not in data
    finally:
        sock.close()
    assert httpx.get(f"{server.url}/health", timeout=30).status_code == 200
    print(
        f"stalled reader: engine request freed {freed_after:.2f} s after sending, "
        f"{generated:.0f} of {max_tokens} tokens generated, {len(data)} bytes delivered"
    )
