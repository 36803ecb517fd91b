"""Incremental parser for text/event-stream bodies as OpenAI-compatible servers send them.

Only ``data:`` fields matter to these APIs; comments (``: keep-alive``) and other fields
are skipped. Events end at a blank line; both LF and CRLF line endings are accepted.
"""

from __future__ import annotations


class SSEParser:
    """Feed it bytes as they arrive; it returns the data payloads of completed events."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> list[bytes]:
        buffer = self._buffer + data
        if b"\r" in buffer:
            buffer = buffer.replace(b"\r\n", b"\n")
        *events, self._buffer = buffer.split(b"\n\n")
        payloads = []
        for event in events:
            lines = [
                line[5:].lstrip(b" ") for line in event.split(b"\n") if line.startswith(b"data:")
            ]
            if lines:
                payloads.append(b"\n".join(lines))
        return payloads

    @property
    def pending(self) -> bytes:
        """Bytes of an event not yet terminated (non-empty when a stream was cut short)."""
        return self._buffer
