"""echo, prompt_logprobs and return_tokens_as_token_ids on the reference target's wire:
what a request asks of the engine, and how the response writer lays the prompt out."""

from __future__ import annotations

import json

import pytest

from moeperf.targets.model.checkpoint import default_model_dir
from moeperf.targets.model.tokenizer import ChatTokenizer
from moeperf.targets.openai_wire import BadRequest
from moeperf.targets.serving.engine.api import TokenLogprob
from moeperf.targets.serving.openai_request import ServedModel, chat_job, completion_job
from moeperf.targets.serving.openai_response import Delta, ResponseWriter


@pytest.fixture(scope="module")
def served() -> ServedModel:
    return ServedModel("tiny", 2048, ChatTokenizer.from_dir(default_model_dir()))


def raw(body: object) -> bytes:
    return json.dumps(body).encode()


def test_echo_and_prompt_logprobs_ask_the_engine_for_the_larger_top_n(served):
    job = completion_job(served, raw({"prompt": [5, 6, 7], "echo": True, "logprobs": 2}))
    assert job.params.prompt_logprobs == 2 and job.echo_text == served.tokenizer.decode([5, 6, 7])
    both = completion_job(
        served, raw({"prompt": "The", "echo": True, "logprobs": 1, "prompt_logprobs": 4})
    )
    assert both.params.prompt_logprobs == 4 and both.prompt_logprobs == 4
    assert both.echo_text == "The"  # a text prompt is echoed as given
    plain = completion_job(served, raw({"prompt": "The", "echo": True}))
    assert plain.params.prompt_logprobs is None and plain.echo_text == "The"
    assert completion_job(served, raw({"prompt": "The"})).params.prompt_logprobs is None
    ids = completion_job(served, raw({"prompt": "x", "return_tokens_as_token_ids": True}))
    assert ids.tokens_as_ids


def test_what_the_wire_cannot_carry_is_refused(served):
    with pytest.raises(BadRequest, match="not available with 'stream'") as caught:
        completion_job(served, raw({"prompt": "x", "prompt_logprobs": 0, "stream": True}))
    assert caught.value.param == "prompt_logprobs"
    chat = {"messages": [{"role": "user", "content": "x"}]}
    for field, value in (("echo", True), ("prompt_logprobs", 1)):
        with pytest.raises(BadRequest, match=field):
            chat_job(served, raw({**chat, field: value}))


def test_the_writer_puts_the_prompt_first_once(served):
    tok = served.tokenizer
    prompt = [10, 11, 12]
    entries = [None, TokenLogprob(11, -1.5, ((11, -1.5), (40, -2.0)), 1),
               TokenLogprob(12, -3.0, ((50, -0.5), (12, -3.0)), 2)]  # fmt: skip
    writer = ResponseWriter(
        tok, False, "id", 0, "tiny", True, echo_text=tok.decode(prompt), prompt_ids=prompt,
        echo_top=1, prompt_top=1, tokens_as_ids=True,
    )  # fmt: skip
    first = Delta("", [TokenLogprob(7, -0.1, ((7, -0.1),))], None, 3, 1, 0, None, entries)
    last = Delta("", [TokenLogprob(8, -0.2, ((8, -0.2),))], "length", 3, 2, 0)
    body = json.loads(writer.body([first, last]))
    choice = body["choices"][0]
    lps = choice["logprobs"]
    assert lps["tokens"] == [
        "token_id:10",
        "token_id:11",
        "token_id:12",
        "token_id:7",
        "token_id:8",
    ]
    assert lps["token_logprobs"] == [None, -1.5, -3.0, -0.1, -0.2]
    assert lps["top_logprobs"][0] is None
    assert lps["top_logprobs"][2] == {"token_id:12": -3.0, "token_id:50": -0.5}  # top 1 + itself
    assert choice["text"].startswith(tok.decode(prompt))
    assert choice["prompt_logprobs"][0] is None
    assert choice["prompt_logprobs"][2] == {
        "12": {"logprob": -3.0, "rank": 2, "decoded_token": "token_id:12"},
        "50": {"logprob": -0.5, "rank": 1, "decoded_token": "token_id:50"},
    }
