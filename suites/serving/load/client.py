"""One streaming request, timestamped when its bytes arrive.

The per-chunk path is kept short: take the clock, split SSE events, parse JSON, append.
Anything that needs a tokenizer is deferred (``StreamResult.texts``) to after the load
level, so tokenization never delays the timestamps of other streams.
"""

from __future__ import annotations

import asyncio
import errno
import json
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp

from collectors.records import ChunkTokensSource, RequestRecord, StreamEnd
from suites.serving.load.auth import redact
from suites.serving.load.openai_api import Api, parse_chunk, rejected_field_hint
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
    *,
    secrets: tuple[str, ...] = (),
) -> StreamResult:
    """Send one request and fill ``record`` (its ids, scenario and intended time are set).

    Never raises for a failed request: the failure is recorded with its error type.
    ``asyncio.CancelledError`` marks the record cancelled and is re-raised.
    ``on_answer`` is called once the target has answered (its response headers arrived).
    ``secrets`` (the values of the headers the session sends) are masked in the error
    message: a server may echo them.
    """
    parser = SSEParser()
    texts: list[str] = []
    unknown_counts = False
    source: ChunkTokensSource | None = None
    previous_usage = 0
    # Usage gives tokens per chunk only while every token-carrying chunk has it (vLLM's
    # continuous_usage_stats); usage on the last chunk alone is the whole response's.
    usage_every_chunk = True
    done = False
    # The last choice carried a finish_reason: some servers end the stream there.
    finished = False
    record.send_ns = clock_ns() - anchor_ns
    try:
        async with session.post(url, json=body) as response:
            on_answer()
            record.http_status = response.status
            await _check_response(response, body, secrets)
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
                        shown = _redacted(payload, secrets)[:80]
                        raise _RequestFailed("malformed_chunk", f"{exc}: {shown!r}") from None
                    if record.server_request_id is None:
                        record.server_request_id = message.get("id")
                    if chunk.error is not None:
                        raise _RequestFailed("server_error_event", chunk.error)
                    usage = chunk.usage_completion_tokens
                    if chunk.usage_prompt_tokens is not None:
                        record.prompt_tokens = chunk.usage_prompt_tokens
                    if chunk.usage_cached_tokens is not None:
                        record.cached_prompt_tokens = chunk.usage_cached_tokens
                    if usage is not None:
                        record.output_tokens = usage
                    if chunk.has_choices:
                        finished = chunk.finished
                    if chunk.has_choices and usage is not None and usage_every_chunk:
                        tokens = usage - previous_usage
                        previous_usage = usage
                        source = source or "usage_stats"
                    else:
                        if chunk.text and usage is None:
                            usage_every_chunk = False
                        if chunk.logprob_tokens is not None:
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
            record.stream_end = _stream_end(done, finished)
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
    except aiohttp.ClientOSError as exc:
        # The target (or a proxy before it) reset the connection: RST, not a clean close.
        reset = exc.errno in (errno.ECONNRESET, errno.EPIPE)
        kind = "connection_reset" if reset else "client_error"
        _fail(record, kind, f"{type(exc).__name__}: {exc}")
    except aiohttp.ClientError as exc:
        _fail(record, "client_error", f"{type(exc).__name__}: {exc}")
    except asyncio.CancelledError:
        record.status = "cancelled"
        record.done_ns = clock_ns() - anchor_ns
        set_token_times(record)
        raise
    if record.error_message is not None:
        # Masked before it is cut: a cut could leave part of a secret that no longer matches.
        record.error_message = redact(record.error_message, secrets)[:_ERROR_BODY_LIMIT]
    record.done_ns = clock_ns() - anchor_ns
    if unknown_counts:
        source = "assumed_one"
    record.chunk_tokens_source = source
    set_token_times(record)
    return StreamResult(record, texts, unknown_counts)


def _fail(record: RequestRecord, error_type: str, message: str, status: int | None = None) -> None:
    record.status = "error"
    record.error_type = error_type
    record.error_message = message  # masked and cut to _ERROR_BODY_LIMIT by stream_request
    if status is not None:
        record.http_status = status


def _stream_end(done: bool, finished: bool) -> StreamEnd:
    """How a stream that ended without error ended; one with neither end is truncated."""
    if done:
        return "done"
    if finished:
        # transformers serve and others close the stream after the finish_reason chunk.
        return "finish_reason"
    raise _RequestFailed(
        "stream_truncated", "stream ended before data: [DONE] and without a finish_reason"
    )


def _redacted(payload: bytes, secrets: tuple[str, ...]) -> bytes:
    if not secrets:
        return payload
    return redact(payload.decode("utf-8", errors="replace"), secrets).encode()


async def _check_response(
    response: aiohttp.ClientResponse, sent: dict, secrets: tuple[str, ...] = ()
) -> None:
    if response.status >= 400:
        body = redact(await response.text(errors="replace"), secrets)[:_ERROR_BODY_LIMIT]
        kind = "http_4xx" if response.status < 500 else "http_5xx"
        message = f"HTTP {response.status}: {body}"
        if response.status in (400, 422):
            # A server that rejects a field the harness sent: say which spec switch stops it.
            hint = rejected_field_hint(sent, response.status, body)
            message = f"{hint}; {message}" if hint else message
        raise _RequestFailed(kind, message, response.status)
    content_type = response.headers.get("Content-Type", "")
    if "text/event-stream" not in content_type:
        body = redact(await response.text(errors="replace"), secrets)[:_ERROR_BODY_LIMIT]
        kind = "not_streaming" if "json" in content_type else "invalid_response"
        raise _RequestFailed(kind, f"expected text/event-stream, got {content_type!r}: {body}")
