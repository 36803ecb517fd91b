"""The two OpenAI-compatible streaming APIs the harness drives: request bodies and chunks."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from moeperf.collectors.request_settings import GREEDY, Sampling

Api = Literal["chat", "completions"]
# OpenAI's newer name for the output cap; some servers accept only one of the two.
MaxTokensField = Literal["max_tokens", "max_completion_tokens"]
ENDPOINTS: dict[str, str] = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}


def request_body(
    api: Api,
    model: str,
    prompt: str,
    max_tokens: int,
    *,
    continuous_usage: bool,
    ignore_eos: bool,
    include_usage: bool = True,
    max_tokens_field: MaxTokensField = "max_tokens",
    min_tokens: int | None = None,
    extra: dict[str, Any] | None = None,
    sampling: Sampling = GREEDY,
    messages: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    """A streaming request (chat: ``messages``, a conversation's history, when given; else
    ``prompt`` as the one user message), asking for usage unless ``include_usage`` is off (then no
    ``stream_options`` at all, for servers that reject the field); of ``sampling``, only
    the fields that are set (the others are the server's default); ``extra`` fields are
    merged in last."""
    body: dict[str, Any] = {"model": model, "stream": True}
    if include_usage:
        stream_options: dict[str, Any] = {"include_usage": True}
        if continuous_usage:
            # vLLM's extension: usage in every chunk gives exact tokens per chunk.
            stream_options["continuous_usage_stats"] = True
        body["stream_options"] = stream_options
    body[max_tokens_field] = max_tokens
    body.update(sampling.sent())
    if ignore_eos:
        # vLLM / SGLang: generate exactly max_tokens so output lengths are controlled.
        body["ignore_eos"] = True
    if min_tokens is not None:
        body["min_tokens"] = min_tokens
    if api == "chat":
        body["messages"] = messages or [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if extra:
        body.update(extra)
    return body


# The spec switch that stops sending each optional field request_body may send; a field
# of the body it did not build itself came from target.extra_body.
_SWITCHES: dict[str, str] = {
    "continuous_usage_stats": "set target.continuous_usage = false",
    "include_usage": "set target.include_usage = false",
    "stream_options": "set target.include_usage = false",
    "ignore_eos": "set target.ignore_eos = false",
    "max_completion_tokens": 'set target.max_tokens_field = "max_tokens"',
    "min_tokens": "remove target.min_tokens",
    "temperature": 'set sampling.temperature = "server-default"',
    "top_p": "remove sampling.top_p",
    # Not an OpenAI field: servers that follow OpenAI strictly refuse it.
    "top_k": "remove sampling.top_k",
    "seed": "remove sampling.seed",
}
_BUILT_FIELDS = frozenset(
    {"model", "stream", "stream_options", "max_tokens", "max_completion_tokens"}
    | {"temperature", "top_p", "top_k", "seed", "ignore_eos", "min_tokens", "messages"}
    | {"prompt"}
)


def rejected_field_hint(body: dict[str, Any], status: int, error_text: str) -> str | None:
    """Which field of ``body`` an HTTP 400/422 ``error_text`` names, and the spec switch
    that stops sending it; None when it names none of the optional fields the harness sent.

    An error may list valid fields after the rejected one (TGI: "unknown field `x`,
    expected one of ..."), so the field named first wins; a nested one wins over
    ``stream_options``, which contains it.
    """
    sent = [name for name in _SWITCHES if name in body]
    options = body.get("stream_options")
    if isinstance(options, dict):
        sent += [name for name in ("continuous_usage_stats", "include_usage") if name in options]
    extra = [name for name in body if name not in _BUILT_FIELDS]
    named: dict[str, int] = {}
    for name in sent + extra:
        found = re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", error_text)
        if found:
            named[name] = found.start()
    if not named:
        return None
    if "continuous_usage_stats" in named or "include_usage" in named:
        # stream_options is then named only as the location of what is inside it; neither
        # may win over a field named before them (a strict server listing several).
        named.pop("stream_options", None)
    field = min(named, key=named.__getitem__)
    switch = f"remove {field!r} from target.extra_body" if field in extra else _SWITCHES[field]
    return f"the target rejected {field!r} (HTTP {status}); {switch}"


@dataclass(slots=True)
class ChunkContent:
    """What one parsed chunk carries: generated text and what it says of its tokens."""

    text: str
    # Cumulative completion tokens from usage, when the chunk has usage.
    usage_completion_tokens: int | None
    usage_prompt_tokens: int | None
    logprob_tokens: int | None
    has_choices: bool
    error: str | None = None
    # usage.prompt_tokens_details.cached_tokens: prompt tokens the server's prefix cache
    # held (OpenAI's field; vLLM with --enable-prompt-tokens-details, the reference target).
    usage_cached_tokens: int | None = None
    # The chunk's choice has a finish_reason: generation ended (a server may then close
    # the stream without data: [DONE]).
    finished: bool = False


def parse_chunk(api: Api, chunk: dict[str, Any]) -> ChunkContent:
    """Extract generated text (content, reasoning or tool call) and token hints."""
    if "error" in chunk and not chunk.get("choices"):
        error = chunk["error"]
        message = error.get("message") if isinstance(error, dict) else str(error)
        return ChunkContent("", None, None, None, False, error=str(message))
    usage = chunk.get("usage") or {}
    choices = chunk.get("choices") or []
    text = ""
    logprob_tokens = None
    finished = False
    if choices:
        choice = choices[0]
        finished = choice.get("finish_reason") is not None
        if api == "chat":
            delta = choice.get("delta") or {}
            text = delta.get("content") or delta.get("reasoning_content") or ""
            text = text or delta.get("reasoning") or ""
            if text.__class__ is not str:
                text = _parts_text(text)
            for call in delta.get("tool_calls") or ():
                # The name is generated too: a chunk carrying only it carries tokens.
                function = call.get("function") or {}
                text += (function.get("name") or "") + (function.get("arguments") or "")
            logprobs = (choice.get("logprobs") or {}).get("content")
        else:
            text = choice.get("text") or ""
            logprobs = (choice.get("logprobs") or {}).get("tokens")
        if logprobs is not None:
            logprob_tokens = len(logprobs)
    return ChunkContent(
        text=text,
        usage_completion_tokens=usage.get("completion_tokens"),
        usage_prompt_tokens=usage.get("prompt_tokens"),
        logprob_tokens=logprob_tokens,
        has_choices=bool(choices),
        finished=finished,
        usage_cached_tokens=(usage.get("prompt_tokens_details") or {}).get("cached_tokens"),
    )


def _parts_text(parts: Any) -> str:
    """The text of a content given as a list of parts (``[{"type": "text", "text": ...}]``).

    Anything but a list of such parts raises TypeError or AttributeError (a malformed
    chunk)."""
    if not isinstance(parts, list):
        raise TypeError(f"delta content is neither text nor a list of parts: {parts!r:.60}")
    return "".join(part.get("text") or "" for part in parts if part.get("type", "text") == "text")
