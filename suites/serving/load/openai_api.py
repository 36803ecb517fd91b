"""The two OpenAI-compatible streaming APIs the harness drives: request bodies and chunks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Api = Literal["chat", "completions"]
ENDPOINTS: dict[str, str] = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}


def request_body(
    api: Api,
    model: str,
    prompt: str,
    max_tokens: int,
    *,
    continuous_usage: bool,
    ignore_eos: bool,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A streaming request asking for usage; ``extra`` fields are merged in last."""
    stream_options: dict[str, Any] = {"include_usage": True}
    if continuous_usage:
        # vLLM's extension: usage in every chunk gives exact tokens per chunk.
        stream_options["continuous_usage_stats"] = True
    body: dict[str, Any] = {
        "model": model,
        "stream": True,
        "stream_options": stream_options,
        "max_tokens": max_tokens,
        "temperature": 0.0,
    }
    if ignore_eos:
        # vLLM / SGLang: generate exactly max_tokens so output lengths are controlled.
        body["ignore_eos"] = True
    if api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if extra:
        body.update(extra)
    return body


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
    if choices:
        choice = choices[0]
        if api == "chat":
            delta = choice.get("delta") or {}
            text = delta.get("content") or delta.get("reasoning_content") or ""
            text = text or delta.get("reasoning") or ""
            for call in delta.get("tool_calls") or ():
                text += (call.get("function") or {}).get("arguments") or ""
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
    )
