"""What one HTTP client may cost the reference target: body size, body time, write time.

uvicorn (h11 and httptools alike) bounds none of these: it reads a body of any size, waits
for its bytes as long as the client likes, and a response write waits in ``drain`` for as
long as the client does not read. So a client that sends its body one byte a second, or
asks for a stream and never reads it, would hold its connection (and, for a stream, its
engine request, batch slot and KV blocks) for as long as it pleased. ``HttpGuard`` is a
plain ASGI wrapper around the whole app (outside Starlette's own middleware, so it sees
the server's ``send``) that bounds all three:

- ``max_body_bytes``: a ``Content-Length`` above it is answered 413 before a byte of the
  body is read; a chunked body is counted as it arrives and refused once past it.
- ``body_read_timeout_s``: the whole body must arrive within this time of the request's
  headers (one deadline, not one per read: a byte a second never times out a per-read
  timer). Past it the read raises 408; no engine request exists yet, since the body is
  parsed before one is made.
- ``write_timeout_s``: one response write (``send``) blocked this long means the client
  stopped reading; the connection is aborted (RST, not a FIN that would wait for the
  unread bytes to drain), the server sees the client gone, and a stream's engine request
  is aborted as for any client that leaves (streaming.py), freeing its slot and blocks.

A refused or timed-out body's response says ``Connection: close``: the rest of that body
is never read, so the connection cannot carry another request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from moeperf.targets.openai_wire import ApiError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Asgi = Callable[[Scope, Receive, Send], Awaitable[None]]

_CLOSE = (b"connection", b"close")


@dataclass(frozen=True)
class HttpLimits:
    """The bounds ``HttpGuard`` enforces (``ReferenceTargetConfig`` documents each)."""

    max_body_bytes: int = 16 * 1024 * 1024
    body_read_timeout_s: float = 30.0
    write_timeout_s: float = 30.0


class PayloadTooLarge(ApiError):
    """The request body is larger than ``max_body_bytes``: 413."""

    status = 413


class BodyReadTimeout(ApiError):
    """The request body did not arrive within ``body_read_timeout_s``: 408."""

    status = 408


class WriteTimeout(Exception):
    """A response write stalled and the connection could not be aborted directly."""


def too_large(limit: int, size: int | None = None) -> PayloadTooLarge:
    got = f" (Content-Length: {size})" if size is not None else ""
    return PayloadTooLarge(
        f"The request body is larger than this server's limit of {limit} bytes{got} "
        "(max_body_bytes)."
    )


class HttpGuard:
    """Wraps an ASGI app with ``limits`` (the module's docstring says what and why)."""

    def __init__(self, app: Asgi, limits: HttpLimits) -> None:
        self.app = app
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        limit = self.limits.max_body_bytes
        if declared is not None and declared > limit:
            await _answer(send, too_large(limit, declared))
            return
        await self.app(scope, *_Exchange(self.limits, receive, send).wrapped())


class _Exchange:
    """One request's reads and writes, bounded."""

    def __init__(self, limits: HttpLimits, receive: Receive, send: Send) -> None:
        self._limits = limits
        self._receive, self._send = receive, send
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._body_deadline = loop.time() + limits.body_read_timeout_s
        self._body_done = False
        self._received = 0
        self._cut = False  # the body was refused part-way: the connection must close

    def wrapped(self) -> tuple[Receive, Send]:
        return self.receive, self.send

    async def receive(self) -> Message:
        if self._body_done:  # e.g. waiting for the client to leave: no deadline
            return await self._receive()
        try:
            async with asyncio.timeout_at(self._body_deadline):
                message = await self._receive()
        except TimeoutError:
            self._cut = True
            raise BodyReadTimeout(
                f"The request body did not arrive within {self._limits.body_read_timeout_s:g} s "
                "of its headers (body_read_timeout_s)."
            ) from None
        if message["type"] != "http.request":  # the client left
            self._body_done = True
            return message
        self._received += len(message.get("body", b""))
        if self._received > self._limits.max_body_bytes:
            self._cut = True
            raise too_large(self._limits.max_body_bytes)
        self._body_done = not message.get("more_body", False)
        return message

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start" and self._cut:
            message = {**message, "headers": [*message.get("headers", ()), _CLOSE]}
        try:
            async with asyncio.timeout(self._limits.write_timeout_s):
                await self._send(message)
        except TimeoutError:
            if not _abort_connection(self._send):
                raise WriteTimeout(
                    f"a response write stalled for {self._limits.write_timeout_s:g} s "
                    "(write_timeout_s): the client is not reading"
                ) from None
            # Aborted: the server now reports the client gone (its receive answers
            # http.disconnect), which ends the response as for any client that leaves.


def _abort_connection(send: Send) -> bool:
    """Abort the connection ``send`` writes to; False when it cannot be reached.

    ASGI offers no way to drop a connection. uvicorn's ``send`` is a method of its
    request cycle, which holds the asyncio transport: ``abort()`` on it discards the unsent
    bytes and resets the connection, where ``close()`` would wait for a client that does
    not read to take them first. Any other server: False (the caller raises instead, and
    the server closes the connection its own way).
    """
    transport = getattr(getattr(send, "__self__", None), "transport", None)
    # Duck-typed: uvloop's transports do not derive from asyncio's classes.
    abort = getattr(transport, "abort", None)
    if not callable(abort) or not callable(getattr(transport, "is_closing", None)):
        return False
    abort()
    return True


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the server's own parser refuses it before the app is called
    return None


async def _answer(send: Send, error: ApiError) -> None:
    body = error.body()
    await send(
        {
            "type": "http.response.start",
            "status": error.status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                _CLOSE,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
