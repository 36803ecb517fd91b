"""One streamed request over the standard library's http.client on gevent's sockets.

Why not Locust's own clients: FastHttpUser (geventhttpclient) and HttpUser (requests)
read a streamed body in blocks of their buffer size, so a chunk can wait in the client
for the next ones before anyone sees it. ``HTTPResponse.read1`` returns what one read of
the socket gave (for a chunked body, up to the end of the current HTTP chunk), the moment
it arrives, and the clock is read right then (benchmarks/engines.py measures the
difference against the synthetic target's ground truth).

Bytes are interpreted by ``suites.serving.load.stream_state``, as the asyncio engine's.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Callable
from urllib.parse import urlsplit

import gevent

from moeperf.collectors.records import RequestRecord
from moeperf.suites.serving.load.openai_api import ENDPOINTS, Api
from moeperf.suites.serving.load.stream_state import (
    RequestFailed,
    StreamResult,
    StreamState,
    answer_is_stream,
    check_answer,
    os_error_type,
)

_READ_SIZE = 65536


class _TotalTimeout(Exception):
    """The request ran past its total timeout (gevent.Timeout raises it in the greenlet)."""


class Connection:
    """One user's keep-alive connection to the target (re-opened after a failure)."""

    def __init__(self, base_url: str, api: Api, headers: dict[str, str], stall_timeout_s: float):
        parts = urlsplit(base_url)
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._https = parts.scheme == "https"
        self._path = parts.path.rstrip("/") + ENDPOINTS[api]
        self._headers = {"Content-Type": "application/json", **headers}
        self._stall_timeout_s = stall_timeout_s
        self._conn: http.client.HTTPConnection | None = None

    def _open(self) -> http.client.HTTPConnection:
        if self._conn is None:
            kind = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            self._conn = kind(self._host, self._port, timeout=self._stall_timeout_s)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def stream(
        self,
        api: Api,
        body: dict,
        record: RequestRecord,
        clock_ns: Callable[[], int],
        anchor_ns: int,
        total_timeout_s: float,
        secrets: tuple[str, ...] = (),
    ) -> StreamResult:
        """Send one request and fill ``record``; a failure is recorded, never raised
        (``gevent.GreenletExit`` and other BaseExceptions pass: the caller records them)."""
        state = StreamState(api, record, secrets)
        feed = state.feed
        payload = json.dumps(body).encode()
        record.send_ns = clock_ns() - anchor_ns
        healthy = False
        try:
            with gevent.Timeout(total_timeout_s, _TotalTimeout):
                conn = self._open()
                conn.request("POST", self._path, payload, self._headers)
                response = conn.getresponse()
                record.http_status = response.status
                content_type = response.getheader("Content-Type", "")
                if not answer_is_stream(response.status, content_type):
                    text = response.read().decode("utf-8", errors="replace")
                    check_answer(response.status, content_type, text, body, secrets)
                while data := response.read1(_READ_SIZE):
                    feed(data, clock_ns() - anchor_ns)
                state.end()
                healthy = not response.will_close
        except RequestFailed as exc:
            state.fail(exc.error_type, str(exc), exc.http_status)
        except ConnectionRefusedError as exc:
            state.fail("connect_error", f"Cannot connect to {self._host}:{self._port}: {exc}")
        except (http.client.IncompleteRead, http.client.RemoteDisconnected) as exc:
            state.fail("stream_truncated", f"{type(exc).__name__}: {exc}")
        except _TotalTimeout:
            state.fail("timeout", "request exceeded its total timeout")
        except TimeoutError as exc:  # the socket's: no bytes for stall_timeout_s
            state.fail("stall_timeout", f"no bytes for the read timeout: {exc}")
        except OSError as exc:
            state.fail(os_error_type(exc), f"{type(exc).__name__}: {exc}")
        except http.client.HTTPException as exc:
            state.fail("client_error", f"{type(exc).__name__}: {exc}")
        finally:
            if not healthy:
                self.close()  # a failed or cut stream leaves the connection unusable
        return state.finish(clock_ns() - anchor_ns)
