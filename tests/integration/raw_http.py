"""Misbehaving HTTP clients over raw sockets on 127.0.0.1, for the servers' hardening tests.

``slow_body`` sends a request's headers, then its body one byte at a time, and never
finishes it; ``stalled_reader`` sends a whole request and never reads the answer. An HTTP
library would do neither (it sends what it has and reads what comes), hence sockets.

A stalled reader's socket advertises an MSS of 1460 bytes (an Ethernet path's) and a
small receive buffer: on loopback the MSS is about 64 KiB, and Linux sizes a socket's
send buffer from the MSS, so a server could otherwise queue megabytes in the kernel
before its own write blocks, and a short response would end before that.
"""

from __future__ import annotations

import json
import select
import socket
import time
from dataclasses import dataclass
from typing import Any

ETHERNET_MSS = 1460


@dataclass(frozen=True)
class RawResponse:
    status: int
    headers: dict[str, str]  # names lower-cased
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def parse_response(raw: bytes) -> RawResponse:
    """One HTTP/1.1 response with a Content-Length body (as the refusals are sent)."""
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return RawResponse(status, headers, body)


def request_head(path: str, content_length: int, host: str = "127.0.0.1") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {content_length}\r\n\r\n"
    ).encode()


@dataclass(frozen=True)
class SlowBodyOutcome:
    elapsed_s: float  # from the headers sent to the server's answer (or its closing)
    body_bytes_sent: int
    answer: bytes  # everything the server sent before it closed the connection
    closed: bool  # the server closed the connection (EOF or reset) within the wait


def slow_body(
    port: int,
    path: str,
    *,
    declared_length: int = 1000,
    interval_s: float = 0.5,
    give_up_s: float = 60.0,
    while_sending: Any = None,
) -> SlowBodyOutcome:
    """Send the headers of a body of ``declared_length`` bytes, then one byte of it every
    ``interval_s`` (never all of it) until the server answers and closes, or ``give_up_s``.
    ``while_sending()`` is called once, after the first second of dribbling."""
    answer = b""
    sent = 0
    closed = False
    called = False
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(request_head(path, declared_length))
        start = time.monotonic()
        while time.monotonic() - start < give_up_s:
            if sent < declared_length - 1:
                try:
                    sock.send(b" ")
                    sent += 1
                except OSError:  # the server closed, and said so with a reset
                    closed = True
                    break
            if not called and while_sending is not None and time.monotonic() - start > 1.0:
                called = True
                while_sending()
            readable, _, _ = select.select([sock], [], [], interval_s)
            if readable:
                try:
                    chunk = sock.recv(65536)
                except ConnectionResetError:
                    closed = True
                    break
                if not chunk:
                    closed = True
                    break
                answer += chunk
        elapsed = time.monotonic() - start
    return SlowBodyOutcome(elapsed, sent, answer, closed)


def stalled_reader(port: int, path: str, body: dict[str, Any]) -> socket.socket:
    """A connection that has sent ``body`` to ``path`` and will never read the answer.
    The caller closes it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, ETHERNET_MSS)
    sock.connect(("127.0.0.1", port))
    content = json.dumps(body).encode()
    sock.sendall(request_head(path, len(content)) + content)
    return sock


def read_until_closed(sock: socket.socket, give_up_s: float = 30.0) -> tuple[bytes, str]:
    """Everything left to read, and how the connection ended: "eof", "reset" or "open"
    (still open after ``give_up_s``)."""
    data = b""
    sock.settimeout(give_up_s)
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        return data, "reset"
    except TimeoutError:
        return data, "open"
    return data, "eof"


def wait_for(condition: Any, timeout_s: float, interval_s: float = 0.2) -> bool:
    """Poll ``condition()`` until true or ``timeout_s``; its last value."""
    deadline = time.monotonic() + timeout_s
    while True:
        if condition():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(interval_s)
