"""Fault windows for a drill: for ``for_s`` seconds, every generation request gets the
window's fault, as a load balancer in trouble or an engine restarting would give it.

The harness opens a window with ``POST /drill/fault``
``{"kind": "http_error" | "reset" | "malformed", "for_s": 2.0, "status": 503}``. The route
exists only on a server started with ``drill_control`` (moeperf sets it for a run with a
``[drill]`` and for nothing else): a server anyone can make fail is not left listening.

- ``http_error``: the request is read, then answered ``status`` (429 with Retry-After: 1,
  as a rate limiter answers; 500, 502, 503, 504) in the OpenAI error shape.
- ``reset``: the request is read, then the connection is reset (RST, SO_LINGER 0): the
  client sees ``ECONNRESET``, not a response.
- ``malformed``: a stream gets an SSE event that is not JSON halfway (a non-streamed
  answer, a body that is not JSON), as the per-request ``malformed_rate`` fault does.

``GET /drill/fault`` says what the last window did: its kind, whether it is still open,
and ``requests_hit``, how many requests it caught. That is the target's own count, the
ground truth the harness checks its failures against; and a window that caught nothing
(a client that sent nothing while it was open) did not test the fault.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass

WINDOW_FAULTS = ("http_error", "reset", "malformed")
ERROR_STATUSES = (429, 500, 502, 503, 504)
_MAX_WINDOW_S = 3600.0


class DrillRequestError(ValueError):
    """A window the server cannot open; the message says which field and what is valid."""


@dataclass(frozen=True, slots=True)
class FaultWindow:
    kind: str
    until_ns: int
    status: int = 503


def parse_window(body: dict[str, object], now_ns: int) -> FaultWindow:
    """The window a ``POST /drill/fault`` body asks for."""
    kind = body.get("kind")
    if kind not in WINDOW_FAULTS:
        raise DrillRequestError(f"'kind' must be one of {', '.join(WINDOW_FAULTS)}; got {kind!r}")
    for_s = body.get("for_s")
    if isinstance(for_s, bool) or not isinstance(for_s, int | float):
        raise DrillRequestError(f"'for_s' must be a number of seconds; got {for_s!r}")
    if not 0 < for_s <= _MAX_WINDOW_S:
        raise DrillRequestError(f"'for_s' must be in (0, {_MAX_WINDOW_S:g}]; got {for_s!r}")
    status = body.get("status", 503)
    if kind == "http_error" and status not in ERROR_STATUSES:
        raise DrillRequestError(
            f"'status' must be one of {', '.join(map(str, ERROR_STATUSES))}; got {status!r}"
        )
    assert isinstance(status, int)
    return FaultWindow(kind, now_ns + round(for_s * 1e9), status)


@dataclass(frozen=True, slots=True)
class WindowReport:
    """``GET /drill/fault``'s body."""

    kind: str | None  # None: no window was opened yet
    open: bool
    requests_hit: int


class DrillWindows:
    """The open window, if any; a new one replaces it (the harness opens them in turn).
    Counts the requests the last window caught (``hit``, from the request handlers)."""

    def __init__(self, clock_ns: Callable[[], int]):
        self._clock_ns = clock_ns
        self._window: FaultWindow | None = None
        self._last: FaultWindow | None = None
        self._requests_hit = 0

    def open(self, window: FaultWindow) -> None:
        self._window = self._last = window
        self._requests_hit = 0

    def active(self) -> FaultWindow | None:
        window = self._window
        if window is not None and self._clock_ns() >= window.until_ns:
            self._window = window = None
        return window

    def hit(self) -> None:
        """A request was given the open window's fault."""
        self._requests_hit += 1

    def last(self) -> WindowReport:
        """The last window's kind, whether it is open, and the requests it caught."""
        if self._last is None:
            return WindowReport(None, False, 0)
        return WindowReport(self._last.kind, self.active() is not None, self._requests_hit)


def reset_connection(sock: socket.socket | None) -> None:
    """Make the coming close send RST instead of FIN (SO_LINGER on, 0 s)."""
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
