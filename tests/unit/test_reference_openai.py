"""Request parsing and response building of the reference target, with the shipped
model's real tokenizer (no server, no engine)."""

from __future__ import annotations

import json

import pytest

from moeperf.targets.model.checkpoint import default_model_dir
from moeperf.targets.model.tokenizer import ChatTokenizer
from moeperf.targets.openai_wire import ApiError, BadRequest, ModelNotFound
from moeperf.targets.serving.engine.api import TokenLogprob
from moeperf.targets.serving.openai_bodies import ChatRequest, CompletionRequest, parse_body
from moeperf.targets.serving.openai_request import ServedModel, chat_job, completion_job
from moeperf.targets.serving.openai_response import Delta, ResponseWriter, TextAssembler

TEXT = "Café naïve 東京 — ✓ résumé, and plain words."


@pytest.fixture(scope="module")
def tokenizer() -> ChatTokenizer:
    return ChatTokenizer.from_dir(default_model_dir())


@pytest.fixture(scope="module")
def served(tokenizer: ChatTokenizer) -> ServedModel:
    return ServedModel("tiny", 64, tokenizer)


def raw(body: object) -> bytes:
    return json.dumps(body).encode()


# -- requests ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "param", "message"),
    [
        (b"{", None, "not valid JSON"),
        (b"3", None, "JSON object"),
        (raw({}), "prompt", "prompt: Field required"),
        (raw({"prompt": 1.5}), "prompt", "prompt: must be one of str, list[int]"),
        (raw({"prompt": "x", "max_tokens": True}), "max_tokens", "valid integer"),
        (raw({"prompt": "x", "temperature": "0"}), "temperature", "valid number"),
        (raw({"prompt": "x", "stream_options": {"include_usage": 1}}), "stream_options", "bool"),
        (raw({"prompt": "x", "logit_bias": {"5": 1}}), "logit_bias", "not supported"),
        (raw({"prompt": "x", "top_k": 5}), "top_k", "not supported"),
    ],
)
def test_bad_completion_bodies_name_the_field(body: bytes, param: str | None, message: str) -> None:
    with pytest.raises(BadRequest, match=message.replace("[", r"\[")) as caught:
        parse_body(CompletionRequest, body)
    assert caught.value.param == param
    assert caught.value.status == 400


def test_neutral_values_of_unsupported_fields_pass() -> None:
    body = {"prompt": "x", "top_k": -1, "echo": False, "presence_penalty": 0.0, "user": "u"}
    assert parse_body(CompletionRequest, raw(body)).prompt == "x"
    with pytest.raises(BadRequest, match="echo"):  # JSON's 1 is not false
        parse_body(CompletionRequest, raw({"prompt": "x", "echo": 1}))


def test_completion_defaults(served: ServedModel, tokenizer: ChatTokenizer) -> None:
    job = completion_job(served, raw({"prompt": "hello world"}))
    assert job.prompt_ids == tokenizer.encode("hello world")
    assert job.params.max_tokens == 16  # OpenAI's legacy default
    assert job.params.temperature == 1.0 and job.params.top_p == 1.0
    assert not job.stream and not job.logprobs and job.stop == ()
    assert job.params.stop_token_ids == ()  # EOS is the engine's (ignore_eos applies to it)


def test_completion_fields_reach_the_job(served: ServedModel) -> None:
    body = {
        "model": "tiny",
        "prompt": [[5, 6, 7]],
        "max_tokens": 4,
        "temperature": 0,
        "seed": 3,
        "stop": "\n",
        "ignore_eos": True,
        "logprobs": 2,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    job = completion_job(served, raw(body))
    assert job.prompt_ids == [5, 6, 7]
    assert (job.params.max_tokens, job.params.temperature, job.params.seed) == (4, 0.0, 3)
    assert job.params.ignore_eos and job.params.logprobs == 2 and job.logprobs
    assert job.stop == ("\n",)
    assert job.stream and job.include_usage and job.continuous_usage


def test_chat_defaults_fill_the_context(served: ServedModel, tokenizer: ChatTokenizer) -> None:
    messages = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    job = chat_job(served, raw({"messages": messages}))
    assert job.prompt_ids == tokenizer.apply_chat_template([{"role": "user", "content": "hi"}])
    assert job.params.max_tokens == 64 - len(job.prompt_ids)
    assert job.params.logprobs is None


def test_chat_logprobs_and_max_completion_tokens(served: ServedModel) -> None:
    body = {
        "messages": [{"role": "user", "content": "hi"}],
        "max_completion_tokens": 5,
        "logprobs": True,
        "top_logprobs": 4,
    }
    job = chat_job(served, raw(body))
    assert job.params.max_tokens == 5 and job.params.logprobs == 4 and job.logprobs
    # max_tokens wins over max_completion_tokens, as vLLM reads them.
    job = chat_job(served, raw({**body, "max_tokens": 3}))
    assert job.params.max_tokens == 3


@pytest.mark.parametrize(
    ("body", "error", "param"),
    [
        ({"prompt": "x", "model": "other"}, ModelNotFound, "model"),
        ({"prompt": "x", "n": 3}, BadRequest, "n"),
        ({"prompt": "x", "max_tokens": 64}, BadRequest, "max_tokens"),
        ({"prompt": [1] * 64, "max_tokens": 1}, BadRequest, "prompt"),
        ({"prompt": [4096]}, BadRequest, "prompt"),
        ({"prompt": "x", "stop": ["a", ""]}, BadRequest, "stop"),
        ({"prompt": "x", "stop_token_ids": [-2]}, BadRequest, "stop_token_ids"),
        ({"prompt": "x", "stream_options": {"include_usage": True}}, BadRequest, "stream_options"),
    ],
)
def test_requests_the_model_cannot_serve(
    served: ServedModel, body: dict, error: type[ApiError], param: str
) -> None:
    with pytest.raises(error) as caught:
        completion_job(served, raw(body))
    assert caught.value.param == param


def test_chat_roles_are_the_templates(served: ServedModel) -> None:
    with pytest.raises(BadRequest, match="'system', 'user' or 'assistant'"):
        parse_body(ChatRequest, raw({"messages": [{"role": "tool", "content": "x"}]}))


# -- text --------------------------------------------------------------------------------


def assemble(tokenizer: ChatTokenizer, ids: list[int], stop=(), final_each=False) -> tuple:
    text = TextAssembler(tokenizer, stop)
    pieces, stopped_at = [], None
    for i, token in enumerate(ids):
        stopped = text.add(token)
        pieces.append(text.take(final=stopped or final_each or i == len(ids) - 1))
        if stopped:
            stopped_at = i
            break
    return text, pieces, stopped_at


def test_incremental_text_equals_decoding_all(tokenizer: ChatTokenizer) -> None:
    ids = tokenizer.encode(TEXT)
    text, pieces, _ = assemble(tokenizer, ids)
    assert text.text == "".join(pieces) == TEXT
    # A character split over tokens appears once whole, never as a replacement character.
    assert all("\ufffd" not in p for p in pieces)


def test_special_tokens_add_no_text(tokenizer: ChatTokenizer) -> None:
    ids = [*tokenizer.encode("one"), tokenizer.end_token_id, tokenizer.eos_token_id]
    assert assemble(tokenizer, ids)[0].text == "one"


def test_stop_string_cuts_the_text(tokenizer: ChatTokenizer) -> None:
    ids = tokenizer.encode(TEXT)
    text, pieces, stopped_at = assemble(tokenizer, ids, stop=("résumé", "zzz"))
    assert text.text == "".join(pieces) == "Café naïve 東京 — ✓ "
    assert text.stop_reason == "résumé"
    assert stopped_at is not None and stopped_at < len(ids) - 1


def test_streamed_text_never_shows_part_of_a_stop_string(tokenizer: ChatTokenizer) -> None:
    # "plain words" streams until "plain wo" could still become the stop "plain wx".
    ids = tokenizer.encode(TEXT)
    text = TextAssembler(tokenizer, ("plain wx",))
    shown = ""
    for token in ids:
        assert not text.add(token)
        shown += text.take(final=False)
        assert "plain w" not in shown
    shown += text.take(final=True)
    assert shown == TEXT


# -- responses ---------------------------------------------------------------------------


def writer(tokenizer: ChatTokenizer, chat: bool, logprobs: bool = True) -> ResponseWriter:
    return ResponseWriter(tokenizer, chat, "id-1", 0, "tiny", logprobs)


def delta(text: str, lps: list[TokenLogprob], finish: str | None, done: int) -> Delta:
    return Delta(text, lps, finish, prompt_tokens=5, completion_tokens=done, cached_tokens=2)


def test_completion_chunks_carry_legacy_logprobs(tokenizer: ChatTokenizer) -> None:
    a, b, c = tokenizer.encode("one two three")[:3]
    w = writer(tokenizer, chat=False)
    first = delta("x", [TokenLogprob(a, -0.5, ((a, -0.5), (b, -1.5)))], None, 1)
    second = delta("y", [TokenLogprob(b, -0.1), TokenLogprob(c, -0.2)], "length", 3)
    chunks = [json.loads(w.chunk(d, with_usage=True)[len(b"data: ") :]) for d in (first, second)]
    lp0, lp1 = (ch["choices"][0]["logprobs"] for ch in chunks)
    assert lp0["tokens"] == [tokenizer.decode([a])]
    assert lp0["top_logprobs"] == [{tokenizer.decode([a]): -0.5, tokenizer.decode([b]): -1.5}]
    # Offsets run on across chunks.
    assert lp1["text_offset"] == [
        len(lp0["tokens"][0]),
        len(lp0["tokens"][0]) + len(lp1["tokens"][0]),
    ]
    assert chunks[1]["choices"][0]["finish_reason"] == "length"
    assert chunks[1]["usage"] == {
        "prompt_tokens": 5,
        "completion_tokens": 3,
        "total_tokens": 8,
        "prompt_tokens_details": {"cached_tokens": 2},
    }


def test_chat_chunks_and_body(tokenizer: ChatTokenizer) -> None:
    (a,) = tokenizer.encode("é")[:1]
    w = writer(tokenizer, chat=True)
    role = json.loads(w.role_chunk(None)[len(b"data: ") :])
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert "usage" not in role
    d = delta("hi", [TokenLogprob(a, -0.3, ((a, -0.3),))], "stop", 1)
    body = json.loads(w.body([d]))
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "hi"}
    entry = body["choices"][0]["logprobs"]["content"][0]
    token = tokenizer.decode([a])
    assert entry == {
        "token": token,
        "logprob": -0.3,
        "bytes": list(token.encode()),
        "top_logprobs": [{"token": token, "logprob": -0.3, "bytes": list(token.encode())}],
    }
    usage = json.loads(w.usage_chunk(d)[len(b"data: ") :])
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 1


def test_no_logprobs_unless_asked(tokenizer: ChatTokenizer) -> None:
    w = writer(tokenizer, chat=False, logprobs=False)
    chunk = json.loads(w.chunk(delta("x", [], None, 1), with_usage=False)[len(b"data: ") :])
    assert chunk["choices"][0]["logprobs"] is None and "usage" not in chunk
