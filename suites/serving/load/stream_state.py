"""What a streamed answer means, whatever client read it: the bytes of an OpenAI
event stream, fed as they arrive with their arrival time, become a ``RequestRecord``'s
chunks, token counts, usage and end; a bad status or content type, a chunk that is not
JSON, an error event or a stream cut short become its error type.

Transports (the asyncio engine's aiohttp client, the Locust engine's gevent client) only
move bytes and take the clock; this module is the one place the stream is interpreted,
so both engines record a request the same way.
"""

from __future__ import annotations

import errno
import json
from dataclasses import dataclass

from moeperf.collectors.records import ChunkTokensSource, ErrorType, RequestRecord, StreamEnd
from moeperf.suites.serving.load.auth import redact
from moeperf.suites.serving.load.openai_api import Api, parse_chunk, rejected_field_hint
from moeperf.suites.serving.load.sse import SSEParser

ERROR_BODY_LIMIT = 500


class RequestFailed(Exception):
    """A request the target failed: its error type (docs/concepts/failed-requests.md)."""

    def __init__(self, error_type: ErrorType, message: str, http_status: int | None = None):
        super().__init__(message)
        self.error_type = error_type
        self.http_status = http_status


@dataclass(slots=True)
class StreamResult:
    record: RequestRecord
    # Text of every chunk, for client-side token counts after the level.
    texts: list[str]
    # True when some token-carrying chunk said nothing of its token count.
    counts_unknown: bool


def check_answer(
    status: int, content_type: str, body: str, sent: dict, secrets: tuple[str, ...] = ()
) -> None:
    """Raise ``RequestFailed`` for an answer that is not an event stream: an HTTP error
    (``body``: its text, read only then) or another content type."""
    if status >= 400:
        text = redact(body, secrets)[:ERROR_BODY_LIMIT]
        kind: ErrorType = "http_4xx" if status < 500 else "http_5xx"
        message = f"HTTP {status}: {text}"
        if status in (400, 422):
            # A server that rejects a field the harness sent: say which spec switch stops it.
            hint = rejected_field_hint(sent, status, text)
            message = f"{hint}; {message}" if hint else message
        raise RequestFailed(kind, message, status)
    if "text/event-stream" not in content_type:
        text = redact(body, secrets)[:ERROR_BODY_LIMIT]
        kind = "not_streaming" if "json" in content_type else "invalid_response"
        raise RequestFailed(kind, f"expected text/event-stream, got {content_type!r}: {text}")


def answer_is_stream(status: int, content_type: str) -> bool:
    """Whether ``check_answer`` passes without the body (so a transport reads it only
    when it is needed for the message)."""
    return status < 400 and "text/event-stream" in content_type


class StreamState:
    """One request's stream as it is read: ``feed`` every block of bytes with its arrival
    time, then ``end`` once the body is over."""

    __slots__ = (
        "_done",
        "_finished",
        "_parser",
        "_previous_usage",
        "_source",
        "_unknown",
        "_usage_every_chunk",
        "api",
        "record",
        "secrets",
        "texts",
    )  # fmt: skip

    def __init__(self, api: Api, record: RequestRecord, secrets: tuple[str, ...] = ()):
        self.api = api
        self.record = record
        self.secrets = secrets
        self.texts: list[str] = []
        self._parser = SSEParser()
        self._unknown = False
        self._source: ChunkTokensSource | None = None
        self._previous_usage = 0
        # Usage gives tokens per chunk only while every token-carrying chunk has it (vLLM's
        # continuous_usage_stats); usage on the last chunk alone is the whole response's.
        self._usage_every_chunk = True
        self._done = False
        # The last choice carried a finish_reason: some servers end the stream there.
        self._finished = False

    def feed(self, data: bytes, arrival_ns: int) -> None:
        record = self.record
        for payload in self._parser.feed(data):
            if payload == b"[DONE]":
                self._done = True
                continue
            try:
                message = json.loads(payload)
                chunk = parse_chunk(self.api, message)
            except (ValueError, AttributeError, TypeError) as exc:
                shown = _redacted(payload, self.secrets)[:80]
                raise RequestFailed("malformed_chunk", f"{exc}: {shown!r}") from None
            if record.server_request_id is None:
                record.server_request_id = message.get("id")
            if chunk.error is not None:
                raise RequestFailed("server_error_event", chunk.error)
            usage = chunk.usage_completion_tokens
            if chunk.usage_prompt_tokens is not None:
                record.prompt_tokens = chunk.usage_prompt_tokens
            if chunk.usage_cached_tokens is not None:
                record.cached_prompt_tokens = chunk.usage_cached_tokens
            if usage is not None:
                record.output_tokens = usage
            if chunk.has_choices:
                self._finished = chunk.finished
            if chunk.has_choices and usage is not None and self._usage_every_chunk:
                tokens = usage - self._previous_usage
                self._previous_usage = usage
                self._source = self._source or "usage_stats"
            else:
                if chunk.text and usage is None:
                    self._usage_every_chunk = False
                if chunk.logprob_tokens is not None:
                    tokens = chunk.logprob_tokens
                    self._source = self._source or "logprobs"
                elif chunk.text:
                    tokens = 1
                    self._unknown = True
                else:
                    tokens = 0
            record.chunk_ns.append(arrival_ns)
            record.chunk_tokens.append(tokens)
            self.texts.append(chunk.text)

    def end(self) -> None:
        """The body ended: how (a stream that ended with neither ``[DONE]`` nor a
        finish_reason was cut short: ``RequestFailed``); the request is then ok."""
        self.record.stream_end = _stream_end(self._done, self._finished)
        self.record.status = "ok"

    def fail(self, error_type: ErrorType, message: str, status: int | None = None) -> None:
        record = self.record
        record.status = "error"
        record.error_type = error_type
        # Masked before it is cut: a cut could leave part of a secret that no longer matches.
        record.error_message = redact(message, self.secrets)[:ERROR_BODY_LIMIT]
        if status is not None:
            record.http_status = status

    def finish(self, done_ns: int) -> StreamResult:
        """After the request ended, whichever way: its done time, token times and source."""
        record = self.record
        record.done_ns = done_ns
        record.chunk_tokens_source = "assumed_one" if self._unknown else self._source
        set_token_times(record)
        return StreamResult(record, self.texts, self._unknown)


def set_token_times(record: RequestRecord) -> None:
    """First and last token times from the chunks that carry tokens."""
    times = [t for t, n in zip(record.chunk_ns, record.chunk_tokens, strict=True) if n > 0]
    record.first_token_ns = times[0] if times else None
    record.last_token_ns = times[-1] if times else None


def _stream_end(done: bool, finished: bool) -> StreamEnd:
    if done:
        return "done"
    if finished:
        # transformers serve and others close the stream after the finish_reason chunk.
        return "finish_reason"
    raise RequestFailed(
        "stream_truncated", "stream ended before data: [DONE] and without a finish_reason"
    )


def _redacted(payload: bytes, secrets: tuple[str, ...]) -> bytes:
    if not secrets:
        return payload
    return redact(payload.decode("utf-8", errors="replace"), secrets).encode()


def os_error_type(exc: OSError) -> ErrorType:
    """A socket error of either transport: a reset by the target (or a proxy before it,
    RST rather than a clean close) or another client error."""
    return "connection_reset" if exc.errno in (errno.ECONNRESET, errno.EPIPE) else "client_error"
