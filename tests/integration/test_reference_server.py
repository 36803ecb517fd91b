"""The reference target over real loopback HTTP: the shipped model, the real engine.

Servers run as ``python -m moeperf.targets.serving --port 0`` children (as the harness starts
them), one per module-scoped fixture so the model loads once per configuration. Clients
are the ``openai`` package, as a user would drive it, and httpx where a test needs the
raw bytes (malformed bodies, SSE framing, disconnects).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import pydantic
import pytest
from openai.types import Completion, CompletionUsage
from openai.types.chat import ChatCompletion, ChatCompletionChunk, ChatCompletionMessageParam
from prometheus_client.parser import text_string_to_metric_families

from moeperf.collectors.sources.target_dialects import (
    REFERENCE_CONTRACT,
    TARGET_ACCEPTED_PER_POSITION,
)
from moeperf.collectors.sources.target_metrics import read_exposition
from moeperf.targets.ready_line import ReadyChild

REPO_ROOT = Path(__file__).resolve().parents[2]
MODEL = "moeperf-tiny-moe"
READY_TIMEOUT_S = 120.0  # importing torch and loading the weights on a busy 2-core machine
PROMPT = "The quick brown fox jumps over the lazy dog. The"


@pytest.fixture(scope="module")
def server(reference_target: Callable[..., ReadyChild]) -> ReadyChild:
    """The default configuration: prefix caching on, no speculation."""
    return reference_target({"seed": 0})


@pytest.fixture(scope="module")
def small_server(reference_target: Callable[..., ReadyChild]) -> ReadyChild:
    """One running and one waiting request at most, MTP with two draft tokens."""
    return reference_target({"max_running_requests": 1, "max_waiting_requests": 1, "mtp_tokens": 2})


def client(server: ReadyChild) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0, timeout=60)


def usage(result: Completion | ChatCompletion | ChatCompletionChunk) -> CompletionUsage:
    """The usage block: the server sends it wherever these tests read it; the client's
    types make it optional because other servers may leave it out."""
    assert result.usage is not None
    return result.usage


def extra(model: pydantic.BaseModel) -> dict[str, Any]:
    """The fields outside the OpenAI schema that one of the client's models kept."""
    assert model.model_extra is not None  # None only where a model forbids extra fields
    return model.model_extra


def scrape(server: ReadyChild) -> dict[str, float]:
    """Every sample of /metrics: ``name{label="v",...}`` -> value."""
    text = httpx.get(f"{server.url}/metrics", timeout=30).text
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            samples[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return samples


def sse_chunks(response: httpx.Response) -> list[dict]:
    """The JSON chunks of a whole SSE body, which must end with [DONE]."""
    events = [e for e in response.text.split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events), events
    assert events[-1] == "data: [DONE]"
    return [json.loads(e[len("data: ") :]) for e in events[:-1]]


def post(server: ReadyChild, path: str, body: dict | bytes, timeout: float = 60) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    return httpx.post(f"{server.url}{path}", content=content, headers=headers, timeout=timeout)


# -- the OpenAI API, as the openai client sees it ---------------------------------------


def test_models_lists_the_served_model(server: ReadyChild) -> None:
    models = client(server).models.list().data
    assert [m.id for m in models] == [MODEL]
    assert extra(models[0])["max_model_len"] == 2048


def test_completion_whole_and_streamed_agree(server: ReadyChild) -> None:
    api = client(server)
    whole = api.completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=12, temperature=0, extra_body={"ignore_eos": True}
    )
    assert whole.object == "text_completion"
    assert whole.choices[0].finish_reason == "length"
    assert usage(whole).completion_tokens == 12
    assert usage(whole).prompt_tokens == len(tokenize(server, PROMPT))
    assert usage(whole).total_tokens == usage(whole).prompt_tokens + 12
    assert whole.choices[0].text

    chunks = list(
        api.completions.create(
            model=MODEL,
            prompt=PROMPT,
            max_tokens=12,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
    )
    *token_chunks, usage_chunk = chunks
    assert "".join(c.choices[0].text for c in token_chunks) == whole.choices[0].text
    assert token_chunks[-1].choices[0].finish_reason == "length"
    assert all(c.choices[0].finish_reason is None for c in token_chunks[:-1])
    assert usage_chunk.choices == []
    assert usage(usage_chunk).completion_tokens == 12
    assert len({c.id for c in chunks}) == 1


def test_chat_whole_and_streamed(server: ReadyChild) -> None:
    api = client(server)
    messages: list[ChatCompletionMessageParam] = [
        {"role": "system", "content": "You answer briefly."},
        {"role": "user", "content": "What is a list?"},
    ]
    whole = api.chat.completions.create(
        model=MODEL, messages=messages, max_completion_tokens=10, temperature=0
    )
    assert whole.object == "chat.completion"
    assert whole.choices[0].message.role == "assistant"
    assert whole.choices[0].finish_reason in ("stop", "length")
    prompt_tokens = post(server, "/tokenize", {"messages": messages}).json()["count"]
    assert usage(whole).prompt_tokens == prompt_tokens

    chunks = list(
        api.chat.completions.create(
            model=MODEL,
            messages=messages,
            max_tokens=10,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[0].choices[0].delta.content == ""
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert chunks[-1].choices == []
    assert usage(chunks[-1]).completion_tokens == usage(whole).completion_tokens


def test_greedy_is_deterministic_and_token_prompts_match_text(server: ReadyChild) -> None:
    api = client(server)
    texts = [
        api.completions.create(model=MODEL, prompt=PROMPT, max_tokens=16, temperature=0)
        .choices[0]
        .text
        for _ in range(2)
    ]
    by_ids = api.completions.create(
        model=MODEL, prompt=tokenize(server, PROMPT), max_tokens=16, temperature=0
    )
    assert texts[0] == texts[1] == by_ids.choices[0].text


def test_seeded_sampling_repeats(server: ReadyChild) -> None:
    api = client(server)

    def sample(seed: int) -> str:
        return (
            api.completions.create(
                model=MODEL, prompt=PROMPT, max_tokens=16, temperature=1.0, seed=seed
            )
            .choices[0]
            .text
        )

    assert sample(7) == sample(7)


def test_continuous_usage_counts_tokens_per_chunk(server: ReadyChild) -> None:
    body = {
        "model": MODEL,
        "prompt": PROMPT,
        "max_tokens": 9,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    chunks = sse_chunks(post(server, "/v1/completions", body))
    assert all("usage" in c for c in chunks)
    counts = [c["usage"]["completion_tokens"] for c in chunks if c["choices"]]
    # Without speculation, one token per engine step, so one per chunk.
    assert counts == list(range(1, 10))
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 9


def test_completion_logprobs_are_the_legacy_object(server: ReadyChild) -> None:
    result = client(server).completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=6, temperature=0, logprobs=2
    )
    lp = result.choices[0].logprobs
    assert lp is not None
    tokens, logprobs, tops, offsets = lp.tokens, lp.token_logprobs, lp.top_logprobs, lp.text_offset
    assert tokens is not None and logprobs is not None and tops is not None
    assert offsets is not None
    n = usage(result).completion_tokens
    assert len(tokens) == len(logprobs) == len(tops) == n
    assert offsets[0] == 0
    for i in range(1, n):
        assert offsets[i] == offsets[i - 1] + len(tokens[i - 1])
    for token, logprob, top in zip(tokens, logprobs, tops, strict=True):
        assert logprob <= 0
        assert token in top and 1 <= len(top) <= 3
        # Greedy: the chosen token is the most likely one.
        assert logprob == pytest.approx(max(top.values()))


def test_chat_logprobs_are_content_entries(server: ReadyChild) -> None:
    result = client(server).chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Name a colour."}],
        max_tokens=5,
        temperature=0,
        logprobs=True,
        top_logprobs=3,
    )
    logprobs = result.choices[0].logprobs
    assert logprobs is not None
    content = logprobs.content
    assert content is not None
    assert len(content) == usage(result).completion_tokens
    for entry in content:
        assert len(entry.top_logprobs) == 3
        assert entry.top_logprobs[0].token == entry.token
        assert entry.logprob == pytest.approx(entry.top_logprobs[0].logprob)
        assert entry.bytes == list(entry.token.encode())


@pytest.mark.parametrize("stream", [False, True])
def test_stop_string_truncates_and_ends_the_request(server: ReadyChild, stream: bool) -> None:
    api = client(server)
    full = api.completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=24, temperature=0, extra_body={"ignore_eos": True}
    )
    text = full.choices[0].text
    assert len(text) > 10
    stop = text[6:9]
    expected = text[: text.find(stop)]
    if stream:
        chunks = list(
            api.completions.create(
                model=MODEL, prompt=PROMPT, max_tokens=24, temperature=0, stop=[stop], stream=True
            )
        )
        got = "".join(c.choices[0].text for c in chunks)
        finish = chunks[-1].choices[0].finish_reason
    else:
        result = api.completions.create(
            model=MODEL, prompt=PROMPT, max_tokens=24, temperature=0, stop=[stop]
        )
        got, finish = result.choices[0].text, result.choices[0].finish_reason
        assert usage(result).completion_tokens < 24
        assert extra(result.choices[0])["stop_reason"] == stop
    assert got == expected
    assert finish == "stop"


def test_repeated_prompt_reports_cached_tokens(server: ReadyChild) -> None:
    api = client(server)
    prompt = " ".join(f"item {i}" for i in range(60))  # well over a few 16-token blocks
    first, second = (
        api.completions.create(model=MODEL, prompt=prompt, max_tokens=2, temperature=0)
        for _ in range(2)
    )
    details = usage(second).prompt_tokens_details
    assert details is not None
    cached = details.cached_tokens
    assert cached is not None
    assert usage(first).prompt_tokens == usage(second).prompt_tokens
    assert 16 <= cached < usage(second).prompt_tokens


def test_reset_prefix_cache_stops_later_hits(server: ReadyChild) -> None:
    api = client(server)
    prompt = " ".join(f"reset {i}" for i in range(60))  # its own blocks, cached by nobody
    hits = "reference_prefix_cache_hits_total"
    resets = "reference_prefix_cache_resets_total"

    def complete() -> int:
        """The request's cached prompt tokens, as its usage reports them."""
        result = api.completions.create(model=MODEL, prompt=prompt, max_tokens=2, temperature=0)
        details = usage(result).prompt_tokens_details
        assert details is not None and details.cached_tokens is not None
        return details.cached_tokens

    start = scrape(server)
    assert complete() == 0
    first = scrape(server)
    cached = complete()
    second = scrape(server)
    assert cached >= 16 and second[hits] - first[hits] == cached

    reply = post(server, "/reset_prefix_cache", b"")
    assert reply.status_code == 200
    body = reply.json()
    assert body["reset"] is True and body["dropped_blocks"] >= cached // 16
    assert complete() == 0
    third = scrape(server)
    assert third[hits] == second[hits]  # looked up, found nothing
    queried = "reference_prefix_cache_queries_total"
    assert third[queried] - second[queried] == len(tokenize(server, prompt))
    assert third[resets] - start[resets] == 1


def tokenize(server: ReadyChild, text: str) -> list[int]:
    return post(server, "/tokenize", {"model": MODEL, "prompt": text}).json()["tokens"]


def test_tokenize_and_detokenize_round_trip(server: ReadyChild) -> None:
    reply = post(server, "/tokenize", {"model": MODEL, "prompt": PROMPT}).json()
    assert reply["count"] == len(reply["tokens"]) > 0
    assert reply["max_model_len"] == 2048
    back = post(server, "/detokenize", {"model": MODEL, "tokens": reply["tokens"]}).json()
    assert back == {"prompt": PROMPT}


def test_health(server: ReadyChild) -> None:
    assert httpx.get(f"{server.url}/health").status_code == 200


# -- /metrics ---------------------------------------------------------------------------


def test_metrics_export_the_reference_contract(server: ReadyChild) -> None:
    client(server).completions.create(model=MODEL, prompt=PROMPT, max_tokens=2)
    text = httpx.get(f"{server.url}/metrics").text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    # Accepted tokens per draft position: one series per position, none with MTP off.
    per_position = "reference_spec_decode_accepted_tokens_per_position_total"
    for name, (kind, labels) in REFERENCE_CONTRACT.items():
        family = families[name.removesuffix("_total") if kind == "counter" else name]
        assert family.type == kind, name
        samples = [s for s in family.samples if s.name == name]
        assert samples or name == per_position, name
        assert all(set(s.labels) == set(labels) for s in samples), name
        assert family.documentation, name
    # The harness's own adapter recognizes the page and reads every canonical series.
    dialect, canonical = read_exposition(text)
    assert dialect == "reference"
    assert len({s.name for s in canonical}) == len(REFERENCE_CONTRACT) - 1
    for name in (
        "reference_time_to_first_token_seconds",
        "reference_inter_token_latency_seconds",
        "reference_e2e_request_latency_seconds",
    ):
        assert families[name].type == "histogram"
        bounds = [float(s.labels["le"]) for s in families[name].samples if "le" in s.labels]
        assert {0.001, 0.002, 0.003} <= set(bounds)  # millisecond resolution at the low end
    for name in ("reference_kv_cache_blocks", "reference_spec_decode_num_drafts"):
        assert name in families


def test_metrics_pass_promtool_lint(server: ReadyChild, promtool) -> None:
    ok, output = promtool(httpx.get(f"{server.url}/metrics").text)
    assert ok, output


def test_metrics_count_a_request(server: ReadyChild) -> None:
    before = scrape(server)
    prompt_tokens = len(tokenize(server, PROMPT))
    client(server).completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=7, temperature=0, extra_body={"ignore_eos": True}
    )
    after = scrape(server)

    def delta(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    assert delta('reference_requests_total{status="ok"}') == 1
    assert delta("reference_prompt_tokens_total") == prompt_tokens
    assert delta("reference_generation_tokens_total") == 7
    assert delta("reference_steps_total") >= 7
    assert delta("reference_time_to_first_token_seconds_count") == 1
    assert delta("reference_inter_token_latency_seconds_count") == 6
    assert delta("reference_e2e_request_latency_seconds_count") == 1
    expert = sum(delta(k) for k in after if k.startswith("reference_expert_tokens_total{"))
    assert expert > 0
    assert after["reference_requests_running"] == 0
    assert 0 <= after["reference_kv_cache_usage_ratio"] <= 1


# -- errors -----------------------------------------------------------------------------

LONG = "word " * 3000  # past the 2048-token context

# (path, body: JSON or raw bytes, status, the error's param)
BAD_REQUESTS: list[tuple[str, dict[str, object] | bytes, int, str | None]] = [
    ("/v1/completions", b"{not json", 400, None),
    ("/v1/completions", b"[1, 2]", 400, None),
    ("/v1/completions", b"", 400, None),
    ("/v1/completions", {"prompt": PROMPT, "model": "gpt-4"}, 404, "model"),
    ("/v1/completions", {"model": MODEL}, 400, "prompt"),
    ("/v1/completions", {"prompt": 42}, 400, "prompt"),
    ("/v1/completions", {"prompt": [1, "a"]}, 400, "prompt"),
    ("/v1/completions", {"prompt": [10**9]}, 400, "prompt"),
    ("/v1/completions", {"prompt": ""}, 400, "prompt"),
    ("/v1/completions", {"prompt": ["a", "b"]}, 400, "prompt"),
    ("/v1/completions", {"prompt": LONG, "max_tokens": 4}, 400, "prompt"),
    ("/v1/completions", {"prompt": PROMPT, "max_tokens": 4000}, 400, "max_tokens"),
    ("/v1/completions", {"prompt": PROMPT, "max_tokens": 0}, 400, "max_tokens"),
    ("/v1/completions", {"prompt": PROMPT, "max_tokens": "8"}, 400, "max_tokens"),
    ("/v1/completions", {"prompt": PROMPT, "max_tokens": 2.5}, 400, "max_tokens"),
    ("/v1/completions", {"prompt": PROMPT, "n": 2}, 400, "n"),
    ("/v1/completions", {"prompt": PROMPT, "temperature": -0.5}, 400, "temperature"),
    ("/v1/completions", {"prompt": PROMPT, "top_p": 0}, 400, "top_p"),
    ("/v1/completions", {"prompt": PROMPT, "stream": "yes"}, 400, "stream"),
    ("/v1/completions", {"prompt": PROMPT, "logprobs": 21}, 400, "logprobs"),
    ("/v1/completions", {"prompt": PROMPT, "logprobs": True}, 400, "logprobs"),
    ("/v1/completions", {"prompt": PROMPT, "stop": [""]}, 400, "stop"),
    ("/v1/completions", {"prompt": PROMPT, "stop": 3}, 400, "stop"),
    ("/v1/completions", {"prompt": PROMPT, "seed": -1}, 400, "seed"),
    # echo and prompt_logprobs are served (test_reference_prompt_logprobs.py); a streamed
    # prompt_logprobs is not, as vLLM's.
    (
        "/v1/completions",
        {"prompt": PROMPT, "prompt_logprobs": 1, "stream": True},
        400,
        "prompt_logprobs",
    ),
    ("/v1/completions", {"prompt": PROMPT, "best_of": 3}, 400, "best_of"),
    ("/v1/completions", {"prompt": PROMPT, "presence_penalty": 0.5}, 400, "presence_penalty"),
    ("/v1/completions", {"prompt": PROMPT, "stream_options": {}}, 400, "stream_options"),
    ("/v1/chat/completions", {"messages": []}, 400, "messages"),
    ("/v1/chat/completions", {"messages": "hi"}, 400, "messages"),
    ("/v1/chat/completions", {"messages": [{"content": "hi"}]}, 400, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "robot", "content": "x"}]}, 400, "messages"),
    (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": [{"type": "image_url", "url": "x"}]}]},
        400,
        "messages",
    ),
    (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2},
        400,
        "top_logprobs",
    ),
    (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]},
        400,
        "tools",
    ),
    (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": LONG}]},
        400,
        "messages",
    ),
    ("/tokenize", {}, 400, "prompt"),
    ("/tokenize", {"prompt": PROMPT, "model": "other"}, 404, "model"),
    ("/detokenize", {"tokens": [-1]}, 400, "tokens"),
    ("/detokenize", {"tokens": "abc"}, 400, "tokens"),
    ("/v1/embeddings", {"input": "x"}, 404, None),
]


def test_bad_requests_get_openai_errors_and_the_server_lives_on(server: ReadyChild) -> None:
    before = scrape(server)
    for path, body, status, param in BAD_REQUESTS:
        reply = post(server, path, body)
        assert reply.status_code == status, (path, body, reply.text)
        error = reply.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}, reply.text
        assert error["code"] == status and error["message"]
        assert error["param"] == param, (path, body, error)
    assert httpx.get(f"{server.url}/v1/completions").status_code == 405
    generations = sum(p.startswith("/v1/c") for p, *_ in BAD_REQUESTS)
    after = scrape(server)
    key = 'reference_requests_total{status="error"}'
    assert after[key] - before[key] == generations
    # Still serving.
    ok = client(server).completions.create(model=MODEL, prompt=PROMPT, max_tokens=3)
    assert usage(ok).completion_tokens >= 1


def test_openai_client_raises_typed_errors(server: ReadyChild) -> None:
    api = client(server)
    with pytest.raises(openai.NotFoundError):
        api.completions.create(model="missing", prompt=PROMPT, max_tokens=2)
    with pytest.raises(openai.BadRequestError, match="context length"):
        api.completions.create(model=MODEL, prompt=LONG, max_tokens=2)


# -- load, disconnects, speculation (a server with a tiny queue and MTP) ------------------


def _running(server: ReadyChild) -> float:
    return scrape(server)["reference_requests_running"]


def _wait_until(condition, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


LONG_RUN = {"model": MODEL, "prompt": PROMPT, "max_tokens": 1500, "ignore_eos": True}


@pytest.mark.slow
def test_full_queue_answers_429(small_server: ReadyChild) -> None:
    # One request running, one waiting: the queue (max_waiting_requests=1) is full.
    url = f"{small_server.url}/v1/completions"
    with (
        httpx.Client(timeout=60) as http,
        http.stream("POST", url, json={**LONG_RUN, "stream": True}) as running,
    ):
        # Keep the iterator: dropping it mid-body would close the connection (an abort).
        lines = running.iter_lines()
        assert next(lines).startswith("data: ")
        with http.stream("POST", url, json={**LONG_RUN, "stream": True}) as waiting:
            assert waiting.status_code == 200
            assert _wait_until(lambda: scrape(small_server)["reference_requests_waiting"] == 1)
            refused = post(small_server, "/v1/completions", LONG_RUN)
            assert refused.status_code == 429
            error = refused.json()["error"]
            assert error["code"] == 429 and "queue is full" in error["message"]
            with pytest.raises(openai.RateLimitError):
                client(small_server).completions.create(model=MODEL, prompt=PROMPT, max_tokens=2)
    # Both streams were left, so both were aborted: the queue has room again.
    assert _wait_until(lambda: _running(small_server) == 0)
    assert client(small_server).completions.create(model=MODEL, prompt=PROMPT, max_tokens=2)


@pytest.mark.slow
def test_client_leaving_a_stream_aborts_its_request(small_server: ReadyChild) -> None:
    before = scrape(small_server)['reference_requests_total{status="abort"}']
    with (
        httpx.Client(timeout=60) as http,
        http.stream(
            "POST", f"{small_server.url}/v1/completions", json={**LONG_RUN, "stream": True}
        ) as response,
    ):
        lines = response.iter_lines()
        assert next(lines).startswith("data: ")
        assert _running(small_server) == 1
    assert _wait_until(lambda: _running(small_server) == 0)
    after = scrape(small_server)
    assert after['reference_requests_total{status="abort"}'] == before + 1
    generated = after["reference_generation_tokens_total"]
    time.sleep(0.3)  # the engine is idle: nothing more is generated for it
    assert scrape(small_server)["reference_generation_tokens_total"] == generated


@pytest.mark.slow
def test_client_leaving_a_whole_response_aborts_its_request(small_server: ReadyChild) -> None:
    before = scrape(small_server)['reference_requests_total{status="abort"}']
    with pytest.raises(httpx.ReadTimeout):
        post(small_server, "/v1/completions", LONG_RUN, timeout=1.0)
    assert _wait_until(lambda: _running(small_server) == 0)
    after = scrape(small_server)['reference_requests_total{status="abort"}']
    assert after == before + 1


@pytest.mark.slow
def test_mtp_steps_arrive_as_multi_token_chunks(small_server: ReadyChild) -> None:
    body = {
        **LONG_RUN,
        "max_tokens": 64,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    before = scrape(small_server)
    chunks = sse_chunks(post(small_server, "/v1/completions", body))
    counts = [c["usage"]["completion_tokens"] for c in chunks if c["choices"]]
    per_chunk = [b - a for a, b in zip([0, *counts], counts, strict=False)]
    assert sum(per_chunk) == 64 == chunks[-1]["usage"]["completion_tokens"]
    assert all(1 <= n <= 3 for n in per_chunk)  # one step: the target and up to 2 drafts
    after = scrape(small_server)
    accepted = after["reference_spec_decode_accepted_tokens_total"] - before.get(
        "reference_spec_decode_accepted_tokens_total", 0
    )
    assert after["reference_spec_decode_draft_tokens_total"] > 0
    # Every accepted draft token saved a step, and it shows as a bigger chunk (the last
    # step may accept drafts past max_tokens, which are counted but not sent).
    extra = sum(n - 1 for n in per_chunk)
    assert 0 < extra <= accepted <= extra + 2
    # With MTP on, the page has a series per draft position, read by the harness's adapter.
    _, canonical = read_exposition(httpx.get(f"{small_server.url}/metrics").text)
    positions = {s.labels for s in canonical if s.name == TARGET_ACCEPTED_PER_POSITION.name}
    assert positions == {(("position", "0"),), (("position", "1"),)}


# -- the process ------------------------------------------------------------------------


def _main(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "moeperf.targets.serving", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--config", "{oops"], "not valid JSON"),
        (["--config", '{"max_batch": 3}'], "max_batch: unknown field"),
        (["--num-kv-blocks", "0"], "num_kv_blocks"),
        (["--dtype", "float8"], "dtype"),
        (["--max-running-requests", "64", "--max-num-batched-tokens", "32"], "max_num_batched"),
        (["--model", "/nonexistent/model"], "model_dir"),
    ],
)
def test_bad_config_exits_2_with_a_message(args: list[str], message: str) -> None:
    done = _main("--port", "0", *args)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert done.stdout == ""
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_sigterm_stops_the_server_cleanly(start_reference: Callable[..., ReadyChild]) -> None:
    with start_reference({}) as running:
        client(running).completions.create(model=MODEL, prompt=PROMPT, max_tokens=2)
        assert running.stop(timeout_s=30) == 0  # SIGTERM, as the harness stops it


@pytest.mark.slow
def test_exit_with_parent() -> None:
    # A parent that starts the server, waits for READY, reports the server's pid and is
    # then killed outright (no chance to stop its child).
    script = (
        "import subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-m', 'moeperf.targets.serving', '--port', '0',"
        " '--exit-with-parent'], stdout=subprocess.PIPE, text=True)\n"
        "assert p.stdout.readline().startswith('READY')\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True
    )
    assert parent.stdout is not None  # stdout=PIPE
    try:
        child = int(parent.stdout.readline())
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()
    assert _wait_until(lambda: _gone(child), timeout_s=15)


def _gone(pid: int) -> bool:
    # An exited orphan may linger as a zombie where PID 1 does not reap: that is gone too.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True
