"""The synthetic server over real loopback HTTP: format, timing ground truth, faults, CLI.

Servers run on a uvloop loop in a background thread (and once as a subprocess); the tests
are plain synchronous http.client clients, so no async test plugin is needed. Timing
checks are lower bounds only: a shared machine can always be slower.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import uvloop
from prometheus_client.parser import text_string_to_metric_families

from moeperf.targets.ready_line import start_ready
from moeperf.targets.synthetic import SyntheticConfig, start

REPO_ROOT = Path(__file__).resolve().parents[2]
MS = 1_000_000  # ns


@dataclass
class Reply:
    status: int
    headers: http.client.HTTPMessage
    body: bytes
    complete: bool  # False when the server closed the connection before the body ended

    def json(self):
        return json.loads(self.body)

    def events(self) -> list[bytes]:
        """The SSE payloads (after ``data: ``), in order."""
        raw = [event for event in self.body.split(b"\n\n") if event]
        assert all(event.startswith(b"data: ") for event in raw), raw
        return [event[len(b"data: ") :] for event in raw]

    def chunks(self) -> list[dict]:
        """The JSON chunks of a stream that must end with [DONE]."""
        events = self.events()
        assert events[-1] == b"[DONE]"
        return [json.loads(event) for event in events[:-1]]


@contextlib.contextmanager
def synthetic_server(**fields) -> Iterator[str]:
    """A synthetic server with ``fields`` on a uvloop thread; yields its base URL."""
    loop = uvloop.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = asyncio.run_coroutine_threadsafe(start(SyntheticConfig(**fields)), loop).result(10)
    try:
        yield server.url
    finally:
        asyncio.run_coroutine_threadsafe(server.close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def call(url: str, method: str, path: str, body: object = None, raw: bytes | None = None) -> Reply:
    parts = urlsplit(url)
    assert parts.hostname is not None
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    try:
        payload, complete = response.read(), True
    except http.client.IncompleteRead as exc:
        payload, complete = exc.partial, False
    conn.close()
    return Reply(response.status, response.headers, payload, complete)


def chat_body(max_tokens: int, **extra) -> dict:
    messages = [
        {"role": "system", "content": "you are terse"},
        {"role": "user", "content": [{"type": "text", "text": "say four words"}]},
    ]
    return {"model": "synthetic", "messages": messages, "max_tokens": max_tokens, **extra}


def ground_truth(url: str, response_id: str) -> dict:
    reply = call(url, "GET", f"/ground_truth/{response_id}")
    assert reply.status == 200
    return reply.json()


def metric_samples(url: str) -> dict[tuple[str, tuple], float]:
    text = call(url, "GET", "/metrics").body.decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_chat_stream_has_role_chunk_tokens_finish_reason_and_usage():
    with synthetic_server(ttft_s=0.02, itl_s=0.002) as url:
        body = chat_body(7, stream=True, stream_options={"include_usage": True})
        reply = call(url, "POST", "/v1/chat/completions", body)
        truth = ground_truth(url, reply.headers["X-Request-Id"])
    assert reply.status == 200 and reply.complete
    assert reply.headers["Content-Type"].startswith("text/event-stream")
    chunks = reply.chunks()
    role, tokens, usage = chunks[0], chunks[1:-1], chunks[-1]
    assert {chunk["id"] for chunk in chunks} == {reply.headers["X-Request-Id"]}
    assert all(chunk["object"] == "chat.completion.chunk" for chunk in chunks)
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert len(tokens) == 7
    text = "".join(chunk["choices"][0]["delta"]["content"] for chunk in tokens)
    assert len(text.split()) == 7
    assert [c["choices"][0]["finish_reason"] for c in tokens] == [None] * 6 + ["length"]
    assert all("usage" not in chunk for chunk in chunks[:-1])
    assert usage["choices"] == []
    # Prompt tokens: words of all message contents (3 + 3).
    assert usage["usage"] == {"prompt_tokens": 6, "completion_tokens": 7, "total_tokens": 13}
    assert truth["chunk_tokens"] == [1] * 7
    assert truth["status"] == "ok" and truth["fault"] is None
    assert truth["done_ns"] >= truth["chunk_write_ns"][-1]


def test_completions_stream_with_continuous_usage_on_every_chunk():
    with synthetic_server(ttft_s=0.0, itl_s=0.001) as url:
        body = {
            "prompt": "one two three four five",
            "max_tokens": 5,
            "stream": True,
            "stream_options": {"continuous_usage_stats": True},
        }
        reply = call(url, "POST", "/v1/completions", body)
    chunks = reply.chunks()
    assert len(chunks) == 5  # no role chunk for completions, no usage-only chunk
    assert all(chunk["object"] == "text_completion" for chunk in chunks)
    assert reply.headers["X-Request-Id"].startswith("cmpl-")
    assert [chunk["usage"]["completion_tokens"] for chunk in chunks] == [1, 2, 3, 4, 5]
    assert all(chunk["usage"]["prompt_tokens"] == 5 for chunk in chunks)
    text = "".join(chunk["choices"][0]["text"] for chunk in chunks)
    assert len(text.split()) == 5
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_logprobs_give_one_entry_per_token_in_multi_token_chunks():
    with synthetic_server(ttft_s=0.0, itl_s=0.001, tokens_per_chunk=3) as url:
        chat = call(url, "POST", "/v1/chat/completions", chat_body(8, stream=True, logprobs=True))
        body = {"prompt": "hi", "max_tokens": 8, "stream": True, "logprobs": 2}
        completion = call(url, "POST", "/v1/completions", body)
    chat_tokens = chat.chunks()[1:]
    assert [len(c["choices"][0]["delta"]["content"].split()) for c in chat_tokens] == [3, 3, 2]
    for chunk in chat_tokens:
        choice = chunk["choices"][0]
        entries = choice["logprobs"]["content"]
        assert "".join(entry["token"] for entry in entries) == choice["delta"]["content"]
        assert all(entry["top_logprobs"] == [] for entry in entries)
        assert all(bytes(entry["bytes"]).decode() == entry["token"] for entry in entries)
    completion_chunks = completion.chunks()
    assert [len(c["choices"][0]["logprobs"]["tokens"]) for c in completion_chunks] == [3, 3, 2]
    for chunk in completion_chunks:
        logprobs = chunk["choices"][0]["logprobs"]
        assert len(logprobs["token_logprobs"]) == len(logprobs["tokens"])
        assert "".join(logprobs["tokens"]) == chunk["choices"][0]["text"]


def test_ground_truth_writes_respect_ttft_and_itl():
    ttft_ns, itl_ns, per_chunk, n_tokens = 30 * MS, 10 * MS, 2, 9
    with synthetic_server(
        ttft_s=ttft_ns / 1e9, itl_s=itl_ns / 1e9, tokens_per_chunk=per_chunk
    ) as url:
        reply = call(
            url, "POST", "/v1/completions", {"prompt": "x", "max_tokens": n_tokens, "stream": True}
        )
        truth = ground_truth(url, reply.headers["X-Request-Id"])
    writes, tokens = truth["chunk_write_ns"], truth["chunk_tokens"]
    assert tokens == [2, 2, 2, 2, 1]
    due_ns = truth["received_ns"] + ttft_ns
    for i, written_ns in enumerate(writes):
        if i:
            due_ns += tokens[i] * itl_ns
            # A gap can only fall short of the ITL by how late the previous chunk was.
            assert written_ns - writes[i - 1] >= tokens[i] * itl_ns - truth["max_lag_ns"]
        assert written_ns >= due_ns  # never early
    assert writes[0] - truth["received_ns"] >= ttft_ns


def test_non_streamed_responses_come_whole_after_the_total_delay():
    with synthetic_server(ttft_s=0.02, itl_s=0.002) as url:
        chat = call(url, "POST", "/v1/chat/completions", chat_body(5, logprobs=True))
        completion = call(url, "POST", "/v1/completions", {"prompt": "a b", "max_tokens": 4})
        truth = ground_truth(url, chat.json()["id"])
    body = chat.json()
    assert body["object"] == "chat.completion"
    assert body["id"] == chat.headers["X-Request-Id"]
    message = body["choices"][0]["message"]
    assert message["role"] == "assistant" and len(message["content"].split()) == 5
    assert len(body["choices"][0]["logprobs"]["content"]) == 5
    assert body["usage"] == {"prompt_tokens": 6, "completion_tokens": 5, "total_tokens": 11}
    assert completion.json()["choices"][0]["finish_reason"] == "length"
    assert completion.json()["usage"]["completion_tokens"] == 4
    assert truth["stream"] is False and truth["chunk_tokens"] == [5]
    assert truth["chunk_write_ns"][0] - truth["received_ns"] >= (20 + 4 * 2) * MS


@pytest.mark.parametrize(
    ("path", "raw", "status", "param"),
    [
        ("/v1/chat/completions", b"{not json", 400, None),
        ("/v1/chat/completions", b'{"max_tokens": 3}', 400, "messages"),
        ("/v1/completions", b'{"max_tokens": 3}', 400, "prompt"),
        ("/v1/completions", b'{"prompt": "a", "max_tokens": 0}', 400, "max_tokens"),
        ("/v1/completions", b'{"prompt": "a", "n": 2}', 400, "n"),
        ("/v1/completions", b'{"prompt": "a", "model": "other"}', 404, "model"),
        ("/ground_truth/query", b'{"ids": "cmpl-1"}', 400, "ids"),
        ("/tokenize", b"{}", 400, "prompt"),
    ],
)
def test_bad_requests_get_openai_style_errors(path, raw, status, param):
    with synthetic_server() as url:
        reply = call(url, "POST", path, raw=raw)
    assert reply.status == status
    error = reply.json()["error"]
    assert error["message"] and error["type"] and error["param"] == param


def test_error_fault_answers_500_with_a_json_error():
    with synthetic_server(error_rate=1.0) as url:
        reply = call(url, "POST", "/v1/chat/completions", chat_body(3, stream=True))
        truth = ground_truth(url, reply.headers["X-Request-Id"])
        samples = metric_samples(url)
    assert reply.status == 500
    assert reply.json()["error"]["type"] == "server_error"
    assert truth["fault"] == "error" and truth["status"] == "error"
    assert truth["chunk_write_ns"] == []
    assert samples[("synthetic_requests_total", (("status", "error"),))] == 1


def test_malformed_fault_inserts_one_bad_event_mid_stream():
    with synthetic_server(ttft_s=0.0, itl_s=0.001, malformed_rate=1.0) as url:
        reply = call(
            url, "POST", "/v1/completions", {"prompt": "x", "max_tokens": 6, "stream": True}
        )
        truth = ground_truth(url, reply.headers["X-Request-Id"])
    events = reply.events()
    assert events.count(b"{not json") == 1
    assert 0 < events.index(b"{not json") < len(events) - 1
    assert events[-1] == b"[DONE]"
    good = [json.loads(event) for event in events[:-1] if event != b"{not json"]
    assert sum(len(chunk["choices"][0]["text"].split()) for chunk in good) == 6
    assert truth["fault"] == "malformed" and truth["chunk_tokens"] == [1] * 6


def test_truncate_fault_closes_the_connection_without_done(caplog):
    caplog.set_level(logging.ERROR)
    with synthetic_server(ttft_s=0.0, itl_s=0.001, truncate_rate=1.0) as url:
        reply = call(url, "POST", "/v1/chat/completions", chat_body(6, stream=True))
        truth = ground_truth(url, reply.headers["X-Request-Id"])
        samples = metric_samples(url)
    assert reply.status == 200 and not reply.complete
    assert b"[DONE]" not in reply.body
    assert truth["fault"] == "truncate" and truth["status"] == "truncated"
    assert truth["chunk_tokens"] == [1] * truth["fault_chunk"] == [1, 1, 1]
    assert samples[("synthetic_requests_total", (("status", "truncated"),))] == 1
    assert samples[("synthetic_requests_running", ())] == 0
    assert not [r for r in caplog.records if r.name.startswith("aiohttp")]


def test_stall_fault_pauses_mid_stream_then_continues():
    stall_ns, itl_ns = 150 * MS, 2 * MS
    with synthetic_server(
        ttft_s=0.0, itl_s=itl_ns / 1e9, stall_rate=1.0, stall_s=stall_ns / 1e9
    ) as url:
        reply = call(
            url, "POST", "/v1/completions", {"prompt": "x", "max_tokens": 6, "stream": True}
        )
        truth = ground_truth(url, reply.headers["X-Request-Id"])
    assert reply.complete and reply.chunks()
    writes, stalled = truth["chunk_write_ns"], truth["fault_chunk"]
    assert truth["fault"] == "stall" and stalled == 3 and len(writes) == 6
    gap_ns = writes[stalled] - writes[stalled - 1]
    assert gap_ns >= stall_ns + itl_ns - truth["max_lag_ns"]


def test_tokenize_counts_words_of_prompts_and_messages():
    with synthetic_server() as url:
        prompt = call(url, "POST", "/tokenize", {"prompt": "a b  c", "return_token_strs": True})
        chat = call(url, "POST", "/tokenize", chat_body(1))
    assert prompt.json()["count"] == 3 and len(prompt.json()["tokens"]) == 3
    assert prompt.json()["token_strs"] == ["a", "b", "c"]
    assert prompt.json()["max_model_len"] == 1_000_000
    assert chat.json()["count"] == 6 and "token_strs" not in chat.json()


def test_models_health_and_metrics():
    with synthetic_server(ttft_s=0.0, itl_s=0.0) as url:
        models = call(url, "GET", "/v1/models").json()
        health = call(url, "GET", "/health")
        call(url, "POST", "/v1/completions", {"prompt": "a b c", "max_tokens": 4, "stream": True})
        call(url, "POST", "/v1/chat/completions", chat_body(2))
        call(url, "POST", "/v1/completions", raw=b"{")
        samples = metric_samples(url)
    assert models["object"] == "list" and models["data"][0]["id"] == "synthetic"
    assert health.status == 200
    assert samples[("synthetic_requests_total", (("status", "ok"),))] == 2
    assert samples[("synthetic_requests_total", (("status", "invalid"),))] == 1
    assert samples[("synthetic_generation_tokens_total", ())] == 6
    assert samples[("synthetic_prompt_tokens_total", ())] == 3 + 6
    assert samples[("synthetic_requests_running", ())] == 0


def test_ground_truth_query_returns_records_and_missing_ids():
    with synthetic_server(ttft_s=0.0, itl_s=0.0, max_records=2) as url:
        ids = [
            call(
                url, "POST", "/v1/completions", {"prompt": "p", "max_tokens": 2, "stream": True}
            ).headers["X-Request-Id"]
            for _ in range(3)
        ]
        reply = call(url, "POST", "/ground_truth/query", {"ids": [*ids, "cmpl-999"]})
        unknown = call(url, "GET", "/ground_truth/cmpl-999")
    assert len(set(ids)) == 3
    result = reply.json()
    # max_records=2: the oldest record was dropped.
    assert set(result["records"]) == set(ids[1:])
    assert result["missing"] == [ids[0], "cmpl-999"]
    record = result["records"][ids[2]]
    assert set(record) >= {"received_ns", "chunk_write_ns", "chunk_tokens", "fault"}
    assert record["chunk_tokens"] == [1, 1]
    assert unknown.status == 404 and unknown.json()["error"]["message"]


def test_client_disconnect_is_quiet_and_releases_the_running_gauge(caplog):
    caplog.set_level(logging.ERROR)
    with synthetic_server(ttft_s=0.0, itl_s=0.01) as url:
        parts = urlsplit(url)
        body = json.dumps({"prompt": "x", "max_tokens": 500, "stream": True}).encode()
        with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
            sock.sendall(
                b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + b"Content-Length: %d\r\n\r\n" % len(body)
                + body
            )
            assert b" w0" in sock.recv(65536) + sock.recv(65536)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            samples = metric_samples(url)
            if samples[("synthetic_requests_running", ())] == 0:
                break
            time.sleep(0.02)
        truth = ground_truth(url, "cmpl-1")
    assert samples[("synthetic_requests_running", ())] == 0
    assert samples[("synthetic_requests_total", (("status", "cancelled"),))] == 1
    assert truth["status"] == "cancelled" and 0 < len(truth["chunk_tokens"]) < 500
    assert not [r for r in caplog.records if r.name.startswith("aiohttp")]


def test_cli_prints_ready_serves_and_exits_cleanly_on_sigterm():
    config = json.dumps({"ttft_s": 0.01, "itl_s": 0.001, "seed": 5})
    command = [sys.executable, "-m", "moeperf.targets.synthetic", "--port", "0", "--config", config]
    child = start_ready(
        [*command, "--tokens-per-chunk", "2"],
        timeout_s=20,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    try:
        url = child.url  # what followed "READY " on its stdout
        assert url.startswith("http://127.0.0.1:")
        reply = call(
            url, "POST", "/v1/completions", {"prompt": "x", "max_tokens": 4, "stream": True}
        )
        assert ground_truth(url, reply.headers["X-Request-Id"])["chunk_tokens"] == [2, 2]
    finally:
        returncode = child.stop(signal.SIGTERM, timeout_s=10)
        assert child.process.stdout is not None
        stdout = child.process.stdout.read()
        stderr = child.stderr_tail()
        child.close()
    assert returncode == 0, stderr
    assert stdout == ""  # READY is the only line


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--config", '{"error_rate": 2}'], "error_rate"),
        (["--config", "{oops"], "not valid JSON"),
        (["--itl-s", "-1"], "itl_s"),
        (["--host", "0.0.0.0"], "loopback"),
    ],
)
def test_cli_rejects_bad_config_with_exit_code_2(args, message):
    proc = subprocess.run(
        [sys.executable, "-m", "moeperf.targets.synthetic", *args],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
