"""Reading OpenAI request bodies: the few fields the synthetic model honours, validated.

A field the synthetic model cannot honour (``n`` > 1, a batch of prompts) is rejected with
HTTP 400 rather than ignored, so a benchmark never measures something other than it asked.
The bounds are the reference target's: prompt plus output within ``MAX_MODEL_LEN``, at
most ``MAX_STOP_STRINGS`` stop strings (the synthetic model never stops on one, but a
request the reference target refuses is refused here too).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from moeperf.targets.openai_wire import ApiError, BadRequest, check_model
from moeperf.targets.synthetic.tokenizer import count_tokens

# What /tokenize reports; a request's prompt and output together may not exceed it.
MAX_MODEL_LEN = 1_000_000
MAX_STOP_STRINGS = 16  # as the reference target (targets/serving/openai_request.py)


class PayloadTooLarge(ApiError):
    """The request body is larger than ``max_body_bytes``: 413."""

    status = 413


class BodyReadTimeout(ApiError):
    """The request body did not arrive within ``body_read_timeout_s``: 408."""

    status = 408


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """The parts of a chat or completions request that shape the response."""

    chat: bool
    stream: bool
    output_tokens: int
    prompt_tokens: int
    logprobs: bool
    include_usage: bool
    continuous_usage: bool


def parse_json_object(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object, or BadRequest."""
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from None
    except RecursionError:  # a RuntimeError: nested deeper than the parser recurses
        raise BadRequest("request body is not valid JSON: nested too deeply") from None
    if not isinstance(body, dict):
        raise BadRequest(f"request body must be a JSON object, got {type(body).__name__}")
    return body


def prompt_text(body: dict[str, Any], *, chat: bool) -> str:
    """The text whose words are the prompt tokens: the prompt, or all message contents."""
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("'messages' must be a non-empty list", "messages")
        return " ".join(_message_text(message) for message in messages)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise BadRequest("'prompt' must be a string (batches are not supported)", "prompt")
    return prompt


def _message_text(message: object) -> str:
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise BadRequest("each message must be an object with a string 'role'", "messages")
    content = message.get("content")
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        # Content parts: only text parts carry tokens for the synthetic model.
        return " ".join(
            part["text"]
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    raise BadRequest("message 'content' must be a string, a list of parts or null", "messages")


def parse_generation(
    body: dict[str, Any], *, chat: bool, model: str, default_output_tokens: int
) -> GenerationRequest:
    """Validate a /v1/chat/completions (``chat``) or /v1/completions body for ``model``."""
    check_model(model, body.get("model"))
    prompt_tokens = count_tokens(prompt_text(body, chat=chat))
    output_tokens = default_output_tokens
    for name in ("max_tokens", "max_completion_tokens"):
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise BadRequest(f"'{name}' must be an integer >= 1, got {value!r}", name)
        if value > MAX_MODEL_LEN:
            raise BadRequest(f"'{name}' must be <= {MAX_MODEL_LEN}, got {value}", name)
        output_tokens = value
        break  # max_tokens first, as documented; max_completion_tokens only without it
    if prompt_tokens + output_tokens > MAX_MODEL_LEN:
        raise BadRequest(
            f"This model's maximum context length is {MAX_MODEL_LEN} tokens. However, you "
            f"requested {prompt_tokens + output_tokens} tokens ({prompt_tokens} in the prompt, "
            f"{output_tokens} in the completion). Please reduce the length of the prompt or "
            "completion.",
            "messages" if chat else "prompt",
        )
    _check_stop(body.get("stop"))
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest(f"'stream' must be a boolean, got {stream!r}", "stream")
    n = body.get("n", 1)
    if n != 1 or isinstance(n, bool):
        raise BadRequest(f"only n=1 is supported, got {n!r}", "n")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise BadRequest("'stream_options' must be an object", "stream_options")
    return GenerationRequest(
        chat=chat,
        stream=stream,
        output_tokens=output_tokens,
        prompt_tokens=prompt_tokens,
        logprobs=_wants_logprobs(body.get("logprobs"), chat=chat),
        include_usage=bool(options.get("include_usage")),
        continuous_usage=bool(options.get("continuous_usage_stats")),
    )


def _check_stop(stop: object) -> None:
    if stop is None or isinstance(stop, str):
        return
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise BadRequest(f"'stop' must be a string or a list of strings, got {stop!r:.80}", "stop")
    if len(stop) > MAX_STOP_STRINGS:
        raise BadRequest(
            f"at most {MAX_STOP_STRINGS} stop strings are supported, got {len(stop)}", "stop"
        )


def _wants_logprobs(value: object, *, chat: bool) -> bool:
    # Chat takes a boolean; legacy completions take an int (top-k, 0 = chosen token only).
    if value is None or value is False:
        return False
    if chat and value is True:
        return True
    if not chat and isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return True
    expected = "a boolean" if chat else "an integer >= 0"
    raise BadRequest(f"'logprobs' must be {expected}, got {value!r}", "logprobs")
