"""When each request's first bytes were read, for the ground truth's ``received_ns``.

aiohttp hands a request to its handler after parsing it, a loop pass or more after its
bytes were read; on a busy server (a calibration's 64 streams of chunks) that wait is
the server's, not the client's, and a stamp at the handler's start would count it on the
client's send side. So each connection's protocol is wrapped (``StampingProtocol``):
it notes the time of the first read after the last request on the connection, and a
middleware (``first_read``) takes it for every request, any route, into the context
variable ``FIRST_READ_NS`` that its handler runs under, and forgets what was read
during the request (its body) once it is answered. A client sends a connection's next
request only after the whole answer, so the next read is the next request's first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

from aiohttp import web

# The handled request's first read (the clock's ns); None where unknown. A context
# variable rather than the request's own storage: the middleware's handler runs in its
# task, and aiohttp's typed request keys are newer than the aiohttp this supports.
FIRST_READ_NS: ContextVar[int | None] = ContextVar("moeperf_first_read_ns", default=None)


class FirstBytes:
    """Per connection (its transport's id), the first read not yet taken by a handler."""

    def __init__(self, clock_ns: Callable[[], int]) -> None:
        self._clock_ns = clock_ns
        self._pending: dict[int, int] = {}

    def read(self, connection: int) -> None:
        """Bytes were read on ``connection``: the first since the last take starts a request."""
        if connection not in self._pending:
            self._pending[connection] = self._clock_ns()

    def take(self, connection: int) -> int | None:
        """The first read of the request now handled on ``connection``; None if unknown (a
        server run without the wrapper, as aiohttp's test client runs it)."""
        return self._pending.pop(connection, None)

    def closed(self, connection: int) -> None:
        self._pending.pop(connection, None)


class StampingProtocol(asyncio.Protocol):
    """aiohttp's protocol for one connection, with its reads noted in ``first_bytes``."""

    def __init__(self, inner: asyncio.Protocol, first_bytes: FirstBytes) -> None:
        self._inner = inner
        self._first_bytes = first_bytes
        self._connection = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._connection = id(transport)
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self._first_bytes.read(self._connection)
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._first_bytes.closed(self._connection)
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()


def stamping(factory: Callable[[], Any], first_bytes: FirstBytes) -> Callable[[], StampingProtocol]:
    """A protocol factory for ``loop.create_server``: ``factory``'s protocols, wrapped."""
    return lambda: StampingProtocol(factory(), first_bytes)


def first_read_middleware(first_bytes: FirstBytes) -> Any:
    """The middleware that gives every request its first read (``FIRST_READ_NS``; None
    where unknown) and forgets the reads of its own body once it is answered."""

    @web.middleware
    async def first_read(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        connection = id(request.transport)
        token = FIRST_READ_NS.set(first_bytes.take(connection))
        try:
            return await handler(request)
        finally:
            FIRST_READ_NS.reset(token)
            # A non-streamed answer is written after this returns, and a stream ended
            # with its last write: nothing of a next request can have been read yet.
            first_bytes.take(connection)

    return first_read
