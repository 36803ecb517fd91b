"""One streaming request, timestamped when its bytes arrive.

The per-chunk path is kept short: take the clock, split SSE events, parse JSON, append.
Anything that needs a tokenizer is deferred (``StreamResult.texts``) to after the load
level, so tokenization never delays the timestamps of other streams.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp

from collectors.records import ChunkTokensSource, RequestRecord
from suites.serving.load.openai_api import Api, parse_chunk
from suites.serving.load.sse import SSEParser

_ERROR_BODY_LIMIT = 500


@dataclass(slots=True)
class StreamResult:
    record: RequestRecord
    # Text of every chunk, for client-side token counts after the level (see module doc).
    texts: list[str]
    # True when some token-carrying chunk said nothing of its token count.
    counts_unknown: bool


class _RequestFailed(Exception):
    def __init__(self, error_type: str, message: str, http_status: int | None = None):
        super().__init__(message)
        self.error_type = error_type
        self.http_status = http_status


def set_token_times(record: RequestRecord) -> None:
    """First and last token times from the chunks that carry tokens."""
    times = [t for t, n in zip(record.chunk_ns, record.chunk_tokens, strict=True) if n > 0]
    record.first_token_ns = times[0] if times else None
    record.last_token_ns = times[-1] if times else None


async def stream_request(
    session: aiohttp.ClientSession,
    url: str,
    api: Api,
    body: dict,
    record: RequestRecord,
    clock_ns: Callable[[], int],
    anchor_ns: int,
    on_answer: Callable[[], None] = lambda: None,
) -> StreamResult:
    """Send one request and fill ``record`` (its ids, scenario and intended time are set).

    Never raises for a failed request: the failure is recorded with its error type.
    ``asyncio.CancelledError`` marks the record cancelled and is re-raised.
    ``on_answer`` is called once the target has answered (its response headers arrived).
    """
    parser = SSEParser()
    texts: list[str] = []
    unknown_counts = False
    source: ChunkTokensSource | None = None
    previous_usage = 0
    done = False
    record.send_ns = clock_ns() - anchor_ns
    try:
        async with session.post(url, json=body) as response:
            on_answer()
            record.http_status = response.status
            await _check_response(response)
            async for data in response.content.iter_any():
                arrival_ns = clock_ns() - anchor_ns
                for payload in parser.feed(data):
                    if payload == b"[DONE]":
                        done = True
                        continue
                    try:
                        message = json.loads(payload)
                        chunk = parse_chunk(api, message)
                    except (ValueError, AttributeError, TypeError) as exc:
                        raise _RequestFailed(
                            "malformed_chunk", f"{exc}: {payload[:80]!r}"
                        ) from None
                    if record.server_request_id is None:
                        record.server_request_id = message.get("id")
                    if chunk.error is not None:
                        raise _RequestFailed("server_error_event", chunk.error)
                    if chunk.usage_prompt_tokens is not None:
                        record.prompt_tokens = chunk.usage_prompt_tokens
                    if chunk.usage_completion_tokens is not None:
                        record.output_tokens = chunk.usage_completion_tokens
                    if chunk.has_choices and chunk.usage_completion_tokens is not None:
                        tokens = chunk.usage_completion_tokens - previous_usage
                        previous_usage = chunk.usage_completion_tokens
                        source = source or "usage_stats"
                    elif chunk.logprob_tokens is not None:
                        tokens = chunk.logprob_tokens
                        source = source or "logprobs"
                    elif chunk.text:
                        tokens = 1
                        unknown_counts = True
                    else:
                        tokens = 0
                    record.chunk_ns.append(arrival_ns)
                    record.chunk_tokens.append(tokens)
                    texts.append(chunk.text)
            if not done:
                raise _RequestFailed("stream_truncated", "stream ended before data: [DONE]")
        record.status = "ok"
    except _RequestFailed as exc:
        _fail(record, exc.error_type, str(exc), exc.http_status)
    except aiohttp.ClientConnectorError as exc:
        _fail(record, "connect_error", str(exc))
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError) as exc:
        _fail(record, "stream_truncated", f"{type(exc).__name__}: {exc}")
    except aiohttp.SocketTimeoutError as exc:
        _fail(record, "stall_timeout", f"no bytes for the read timeout: {exc}")
    except TimeoutError:
        _fail(record, "timeout", "request exceeded its total timeout")
    except aiohttp.ClientError as exc:
        _fail(record, "client_error", f"{type(exc).__name__}: {exc}")
    except asyncio.CancelledError:
        record.status = "cancelled"
        record.done_ns = clock_ns() - anchor_ns
        set_token_times(record)
        raise
    record.done_ns = clock_ns() - anchor_ns
    if unknown_counts:
        source = "assumed_one"
    record.chunk_tokens_source = source
    set_token_times(record)
    return StreamResult(record, texts, unknown_counts)


def _fail(record: RequestRecord, error_type: str, message: str, status: int | None = None) -> None:
    record.status = "error"
    record.error_type = error_type
    record.error_message = message[:_ERROR_BODY_LIMIT]
    if status is not None:
        record.http_status = status


async def _check_response(response: aiohttp.ClientResponse) -> None:
    if response.status >= 400:
        body = (await response.text(errors="replace"))[:_ERROR_BODY_LIMIT]
        kind = "http_4xx" if response.status < 500 else "http_5xx"
        raise _RequestFailed(kind, f"HTTP {response.status}: {body}", response.status)
    content_type = response.headers.get("Content-Type", "")
    if "text/event-stream" not in content_type:
        body = (await response.text(errors="replace"))[:_ERROR_BODY_LIMIT]
        kind = "not_streaming" if "json" in content_type else "invalid_response"
        raise _RequestFailed(kind, f"expected text/event-stream, got {content_type!r}: {body}")
