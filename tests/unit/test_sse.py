from suites.serving.load.openai_api import parse_chunk, request_body
from suites.serving.load.sse import SSEParser


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
