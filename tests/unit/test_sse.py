import pytest

from moeperf.suites.serving.load.openai_api import parse_chunk, rejected_field_hint, request_body
from moeperf.suites.serving.load.sse import SSEParser


def test_events_split_across_reads_are_joined():
    parser = SSEParser()
    assert parser.feed(b'data: {"a"') == []
    assert parser.feed(b": 1}\n") == []
    assert parser.feed(b"\ndata: [DONE]\n\n") == [b'{"a": 1}', b"[DONE]"]
    assert parser.pending == b""


def test_crlf_comments_and_other_fields_are_handled():
    parser = SSEParser()
    payloads = parser.feed(b": keep-alive\r\n\r\nevent: x\r\ndata: 1\r\n\r\ndata:2\n\n")
    assert payloads == [b"1", b"2"]


def test_unterminated_event_stays_pending():
    parser = SSEParser()
    parser.feed(b"data: 1\n\ndata: {half")
    assert parser.pending == b"data: {half"


def test_chat_chunk_text_reasoning_and_tool_calls_count_as_generated():
    content = parse_chunk("chat", {"choices": [{"delta": {"content": "hi"}}]})
    reasoning = parse_chunk("chat", {"choices": [{"delta": {"reasoning_content": "hm"}}]})
    tool = parse_chunk(
        "chat",
        {"choices": [{"delta": {"tool_calls": [{"function": {"arguments": '{"x"'}}]}}]},
    )
    role_only = parse_chunk("chat", {"choices": [{"delta": {"role": "assistant", "content": ""}}]})
    assert (content.text, reasoning.text, tool.text, role_only.text) == ("hi", "hm", '{"x"', "")


def test_usage_and_logprobs_hints():
    chunk = parse_chunk(
        "completions",
        {
            "choices": [{"text": "a b", "logprobs": {"tokens": ["a", " b"]}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 7},
        },
    )
    assert chunk.logprob_tokens == 2
    assert chunk.usage_completion_tokens == 7
    assert chunk.usage_prompt_tokens == 5
    final = parse_chunk("chat", {"choices": [], "usage": {"completion_tokens": 9}})
    assert not final.has_choices and final.usage_completion_tokens == 9


def test_error_event_is_reported():
    chunk = parse_chunk("chat", {"error": {"message": "overloaded"}})
    assert chunk.error == "overloaded"


def test_request_body_asks_for_usage_and_merges_extra_last():
    body = request_body(
        "chat", "m", "p", 8, continuous_usage=True, ignore_eos=True, extra={"temperature": 0.7}
    )
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert body["messages"] == [{"role": "user", "content": "p"}]
    assert body["temperature"] == 0.7 and body["ignore_eos"] is True
    plain = request_body("completions", "m", "p", 8, continuous_usage=False, ignore_eos=False)
    assert plain["stream_options"] == {"include_usage": True}
    assert "ignore_eos" not in plain and plain["prompt"] == "p"


def test_role_only_chunks_carry_no_text():
    for delta in ({"role": "assistant"}, {"role": "assistant", "content": None}, {}):
        assert parse_chunk("chat", {"choices": [{"delta": delta}]}).text == ""


def test_reasoning_field_and_tool_call_names_count_as_generated():
    reasoning = parse_chunk("chat", {"choices": [{"delta": {"reasoning": "hm"}}]})
    named = {"tool_calls": [{"index": 0, "function": {"name": "get_weather"}}]}
    assert reasoning.text == "hm"
    assert parse_chunk("chat", {"choices": [{"delta": named}]}).text == "get_weather"


def test_content_parts_are_joined_and_other_shapes_are_malformed():
    parts = [{"type": "text", "text": "a"}, {"type": "image_url"}, {"text": "b"}]
    chunk = parse_chunk("chat", {"choices": [{"delta": {"content": parts}}]})
    assert chunk.text == "ab"
    with pytest.raises(TypeError):
        parse_chunk("chat", {"choices": [{"delta": {"content": {"text": "a"}}}]})


def test_finish_reason_marks_the_chunk_finished():
    assert parse_chunk("chat", {"choices": [{"delta": {}, "finish_reason": "stop"}]}).finished
    assert not parse_chunk("chat", {"choices": [{"delta": {}, "finish_reason": None}]}).finished
    completion = {"choices": [{"text": "", "finish_reason": "length"}]}
    assert parse_chunk("completions", completion).finished
    assert not parse_chunk("chat", {"choices": [], "usage": {"completion_tokens": 3}}).finished


def test_request_body_fields_some_servers_reject_can_be_left_out():
    body = request_body(
        "chat", "m", "p", 8, continuous_usage=True, ignore_eos=False, include_usage=False,
        max_tokens_field="max_completion_tokens", min_tokens=4,
    )  # fmt: skip
    assert "stream_options" not in body and "max_tokens" not in body
    assert body["max_completion_tokens"] == 8 and body["min_tokens"] == 4
    plain = request_body("chat", "m", "p", 8, continuous_usage=False, ignore_eos=False)
    assert "min_tokens" not in plain and plain["max_tokens"] == 8


SENT = request_body(
    "chat", "m", "p", 8, continuous_usage=True, ignore_eos=True, min_tokens=2,
    extra={"chat_template_kwargs": {"enable_thinking": False}, "top_k": 1},
)  # fmt: skip


@pytest.mark.parametrize(
    ("error_text", "hint"),
    [
        (
            '{"error": {"message": "Unrecognized request argument supplied: ignore_eos"}}',
            "the target rejected 'ignore_eos' (HTTP 422); set target.ignore_eos = false",
        ),
        # serde names the unknown field, then lists valid ones: the first named wins.
        (
            "Failed to deserialize the JSON body into the target type: unknown field "
            "`min_tokens`, expected one of `max_tokens`, `stream`, `stream_options`",
            "the target rejected 'min_tokens' (HTTP 422); remove target.min_tokens",
        ),
        # pydantic's location names stream_options first; the nested field is the culprit.
        (
            "[{'type': 'extra_forbidden', 'loc': ('body', 'stream_options', "
            "'continuous_usage_stats'), 'msg': 'Extra inputs are not permitted'}]",
            "the target rejected 'continuous_usage_stats' (HTTP 422); "
            "set target.continuous_usage = false",
        ),
        # Several rejected: the first named wins, nested or not (the container never does).
        (
            '{"detail":[{"type":"extra_forbidden","loc":["body","ignore_eos"]},'
            '{"type":"extra_forbidden","loc":["body","stream_options","continuous_usage_stats"]}]}',
            "the target rejected 'ignore_eos' (HTTP 422); set target.ignore_eos = false",
        ),
        (
            "stream_options is not supported",
            "the target rejected 'stream_options' (HTTP 422); set target.include_usage = false",
        ),
        (
            "unexpected keyword argument 'chat_template_kwargs'",
            "the target rejected 'chat_template_kwargs' (HTTP 422); "
            "remove 'chat_template_kwargs' from target.extra_body",
        ),
        # A key of extra_body must be named as a word, not inside another one.
        ("top_k_fraction must be positive; max_tokens too large", None),
        ("This model's maximum context length is 2048 tokens", None),
    ],
)
def test_a_rejected_field_is_named_with_its_spec_switch(error_text: str, hint: str | None):
    assert rejected_field_hint(SENT, 422, error_text) == hint


def test_a_field_not_sent_is_never_blamed():
    body = request_body(
        "chat", "m", "p", 8, continuous_usage=False, ignore_eos=False,
        max_tokens_field="max_completion_tokens",
    )  # fmt: skip
    assert rejected_field_hint(body, 400, "ignore_eos is not allowed") is None
    assert rejected_field_hint(body, 400, "max_completion_tokens: unknown") == (
        "the target rejected 'max_completion_tokens' (HTTP 400); "
        'set target.max_tokens_field = "max_tokens"'
    )
