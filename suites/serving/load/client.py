"""One streaming request over aiohttp (the asyncio engine), timestamped when its bytes
arrive.

The per-chunk path is kept short: take the clock, hand the bytes to the stream's state
(``stream_state.py``: what the stream means, shared with the Locust engine). Anything
that needs a tokenizer is deferred (``StreamResult.texts``) to after the load level, so
tokenization never delays the timestamps of other streams.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import aiohttp

from moeperf.collectors.records import RequestRecord
from moeperf.suites.serving.load.openai_api import Api
from moeperf.suites.serving.load.stream_state import (
    RequestFailed,
    StreamResult,
    StreamState,
    answer_is_stream,
    check_answer,
    os_error_type,
    set_token_times,
)

__all__ = ["StreamResult", "set_token_times", "stream_request"]


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
    state = StreamState(api, record, secrets)
    feed = state.feed
    record.send_ns = clock_ns() - anchor_ns
    try:
        async with session.post(url, json=body) as response:
            on_answer()
            record.http_status = response.status
            content_type = response.headers.get("Content-Type", "")
            if not answer_is_stream(response.status, content_type):
                text = await response.text(errors="replace")
                check_answer(response.status, content_type, text, body, secrets)
            async for data in response.content.iter_any():
                feed(data, clock_ns() - anchor_ns)
            state.end()
    except RequestFailed as exc:
        state.fail(exc.error_type, str(exc), exc.http_status)
    except aiohttp.ClientConnectorError as exc:
        state.fail("connect_error", str(exc))
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError) as exc:
        state.fail("stream_truncated", f"{type(exc).__name__}: {exc}")
    except aiohttp.SocketTimeoutError as exc:
        state.fail("stall_timeout", f"no bytes for the read timeout: {exc}")
    except TimeoutError:
        state.fail("timeout", "request exceeded its total timeout")
    except aiohttp.ClientOSError as exc:
        state.fail(os_error_type(exc), f"{type(exc).__name__}: {exc}")
    except aiohttp.ClientError as exc:
        state.fail("client_error", f"{type(exc).__name__}: {exc}")
    except asyncio.CancelledError:
        record.status = "cancelled"
        record.done_ns = clock_ns() - anchor_ns
        set_token_times(record)
        raise
    return state.finish(clock_ns() - anchor_ns)
