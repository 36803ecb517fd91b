"""One bounded probe request and what came back, chunk by chunk.

The probe asks small questions (8 output tokens each) and keeps what a benchmark needs to
know of each answer: the HTTP status, whether it was a stream, and per chunk whether it
had choices, text, a role-only delta, a finish_reason, usage and logprobs. Chunks are
read with the load path's own parser (``openai_api.parse_chunk``), so the probe sees a
stream exactly as a run will.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from moeperf.suites.serving.load.openai_api import ENDPOINTS, Api, parse_chunk
from moeperf.suites.serving.load.sse import SSEParser

PROBE_MAX_TOKENS = 8
_BODY_LIMIT = 300
# Masks secrets (header values from the environment) in what the target said: applied
# before any text is cut, since a cut secret no longer matches.
Mask = Callable[[str], str]


def _unmasked(text: str) -> str:
    return text


@dataclass(frozen=True, slots=True)
class ChunkFacts:
    has_choices: bool
    text: str
    # A delta with a role and no generated text (sent before generation by many servers).
    role_only: bool
    finished: bool
    usage_completion_tokens: int | None
    logprob_tokens: int | None


@dataclass(frozen=True, slots=True)
class StreamAnswer:
    """One probe request's answer. ``problem`` is set when it was not a readable stream."""

    status: int | None
    content_type: str = ""
    problem: str | None = None
    # The start of the error body of an HTTP error (or of a body that was not a stream).
    body: str = ""
    chunks: tuple[ChunkFacts, ...] = ()
    done: bool = False  # data: [DONE] came

    @property
    def ok(self) -> bool:
        return self.problem is None

    @property
    def token_chunks(self) -> tuple[ChunkFacts, ...]:
        return tuple(c for c in self.chunks if c.text)

    @property
    def usage_chunks(self) -> tuple[ChunkFacts, ...]:
        return tuple(c for c in self.chunks if c.usage_completion_tokens is not None)


def base_body(api: Api, model: str, prompt: str) -> dict[str, Any]:
    """The smallest streaming request: nothing a server could refuse but the essentials."""
    body: dict[str, Any] = {"model": model, "stream": True, "max_tokens": PROBE_MAX_TOKENS}
    if api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return body


def _role_only(api: Api, message: Mapping[str, Any]) -> bool:
    if api != "chat":
        return False
    choices = message.get("choices") or []
    delta = (choices[0].get("delta") or {}) if choices else {}
    text_keys = ("content", "reasoning_content", "reasoning", "tool_calls")
    return "role" in delta and not any(delta.get(key) for key in text_keys)


async def exchange(
    session: aiohttp.ClientSession,
    base_url: str,
    api: Api,
    body: Mapping[str, Any],
    mask: Mask = _unmasked,
) -> StreamAnswer:
    """POST ``body`` to the API's endpoint and read the whole answer (the session's
    timeout bounds it); every failure is an answer naming it, never an exception."""
    url = base_url.rstrip("/") + ENDPOINTS[api]
    try:
        async with session.post(url, json=dict(body)) as response:
            content_type = response.headers.get("Content-Type", "")
            if response.status >= 400:
                text = mask(await response.text(errors="replace"))[:_BODY_LIMIT]
                return StreamAnswer(response.status, content_type, f"HTTP {response.status}", text)
            if "text/event-stream" not in content_type:
                text = mask(await response.text(errors="replace"))[:_BODY_LIMIT]
                return StreamAnswer(
                    response.status,
                    content_type,
                    f"HTTP {response.status} with Content-Type {content_type!r}, not a stream",
                    text,
                )
            return await _read_stream(response, api, content_type, mask)
    except aiohttp.ClientError as exc:
        return StreamAnswer(None, problem=mask(f"{type(exc).__name__}: {exc}"))
    except TimeoutError:
        return StreamAnswer(None, problem="no complete answer within the probe's timeout")


async def _read_stream(
    response: aiohttp.ClientResponse, api: Api, content_type: str, mask: Mask
) -> StreamAnswer:
    parser = SSEParser()
    chunks: list[ChunkFacts] = []
    done = False
    async for data in response.content.iter_any():
        for payload in parser.feed(data):
            if payload == b"[DONE]":
                done = True
                continue
            try:
                message = json.loads(payload)
                chunk = parse_chunk(api, message)
                role_only = _role_only(api, message)
            except (ValueError, AttributeError, TypeError) as exc:
                shown = mask(payload.decode("utf-8", errors="replace"))[:80]
                problem = mask(f"a chunk that is not an OpenAI chunk ({exc})") + f": {shown!r}"
                return StreamAnswer(response.status, content_type, problem, chunks=tuple(chunks))
            if chunk.error is not None:
                problem = f"an error event in the stream: {mask(chunk.error)[:_BODY_LIMIT]}"
                return StreamAnswer(response.status, content_type, problem, chunks=tuple(chunks))
            chunks.append(
                ChunkFacts(
                    has_choices=chunk.has_choices,
                    text=chunk.text,
                    role_only=role_only,
                    finished=chunk.finished,
                    usage_completion_tokens=chunk.usage_completion_tokens,
                    logprob_tokens=chunk.logprob_tokens,
                )
            )
    answer = StreamAnswer(response.status, content_type, chunks=tuple(chunks), done=done)
    if not answer.token_chunks:
        return StreamAnswer(
            response.status,
            content_type,
            f"a stream of {len(chunks)} chunk(s) without generated text",
            chunks=tuple(chunks),
            done=done,
        )
    if not done and not any(c.finished for c in chunks):
        return StreamAnswer(
            response.status,
            content_type,
            "a stream that ended with neither data: [DONE] nor a finish_reason (truncated)",
            chunks=tuple(chunks),
        )
    return answer
