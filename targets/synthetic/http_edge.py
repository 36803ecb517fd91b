"""The synthetic server's HTTP edge: a request body read within bounds, and the error
answers (an OpenAI-shaped error body, or an ``ApiError`` refused).

Apart from the handlers because every one of them reads a body or refuses one the same
way (``generation.py``, ``endpoints.py``).
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from moeperf.targets.openai_wire import ApiError, error_body
from moeperf.targets.synthetic.openai_request import BodyReadTimeout, PayloadTooLarge
from moeperf.targets.synthetic.state import STATE


def error_response(status: int, message: str, *, kind: str) -> web.Response:
    body = error_body(message, kind=kind, code=status)
    return web.Response(status=status, body=body, content_type="application/json")


def refusal(exc: ApiError) -> web.Response:
    response = web.Response(status=exc.status, body=exc.body(), content_type="application/json")
    if isinstance(exc, PayloadTooLarge | BodyReadTimeout):
        response.force_close()  # the rest of the body is never read
    return response


async def read_body(request: web.Request) -> bytes:
    """The body, bounded (aiohttp waits for a body's bytes as long as they take): 413
    over max_body_bytes, declared or as it arrives; 408 unless it is all in within
    body_read_timeout_s. Read before any stream slot is taken, so a slow body holds none."""
    config = request.app[STATE].config
    limit = config.max_body_bytes
    too_large = PayloadTooLarge(
        f"The request body is larger than this server's limit of {limit} bytes (max_body_bytes).",
    )
    if request.content_length is not None and request.content_length > limit:
        raise too_large
    try:
        async with asyncio.timeout(config.body_read_timeout_s):
            return await request.read()
    except TimeoutError:
        raise BodyReadTimeout(
            f"The request body did not arrive within {config.body_read_timeout_s:g} s of its "
            "headers (body_read_timeout_s)."
        ) from None
    except web.HTTPRequestEntityTooLarge:
        raise too_large from None
