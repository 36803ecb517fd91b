"""The reference target's API key, as vLLM's ``--api-key``: every ``/v1/*`` route wants
``Authorization: Bearer KEY``; ``/health``, ``/metrics`` and the rest stay open.

The key comes from ``--api-key`` or, without the flag, from ``MOEPERF_API_KEY`` (as vLLM
reads ``VLLM_API_KEY``; the variable keeps the key out of the process list). It is
compared in constant time and never written: not to the logs, not in an error body.

The check is a plain ASGI middleware, not Starlette's ``BaseHTTPMiddleware``, so that a
streamed response passes through it untouched (no extra task or queue per chunk).
"""

from __future__ import annotations

import argparse
import hmac
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

from moeperf.targets.openai_wire import error_body
from moeperf.targets.serving.errors import ReferenceConfigError

ENV_VAR = "MOEPERF_API_KEY"
_GUARDED_PREFIX = "/v1"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Asgi = Callable[[Scope, Receive, Send], Awaitable[None]]

_REFUSAL = error_body(
    "Missing or wrong API key: send the header 'Authorization: Bearer <key>' with the key "
    "this server was started with",
    kind="authentication_error",
    code=401,
)


def add_api_key_flag(parser: argparse.ArgumentParser) -> None:
    """``--api-key KEY``."""
    parser.add_argument(
        "--api-key",
        default=None,
        metavar="KEY",
        help=f"require 'Authorization: Bearer KEY' on every /v1/* route (/health and "
        f"/metrics stay open); without the flag, {ENV_VAR} if set; unset: no key",
    )


def api_key(flag: str | None, environ: Mapping[str, str]) -> str | None:
    """The key to require: the flag's, else the environment's; None for none. An empty
    ``--api-key`` is a ``ReferenceConfigError`` (a ``--api-key "$KEY"`` whose variable is
    unset would otherwise serve without a key); an empty variable means none."""
    if flag is not None:
        if not flag:
            raise ReferenceConfigError(
                f"--api-key: the key is empty; give one, or leave the flag out (and {ENV_VAR} "
                "unset) to serve without a key"
            )
        return flag
    return environ.get(ENV_VAR) or None


class ApiKeyMiddleware:
    """Answers 401 with an OpenAI error object to a ``/v1/*`` request without the key."""

    def __init__(self, app: Asgi, api_key: str) -> None:
        self.app = app
        self._expected = b"Bearer " + api_key.encode("utf-8")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _guarded(scope["path"]) or self._authorized(scope):
            await self.app(scope, receive, send)
            return
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(_REFUSAL)).encode()),
                    (b"www-authenticate", b"Bearer"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": _REFUSAL})

    def _authorized(self, scope: Scope) -> bool:
        given = next((v for k, v in scope["headers"] if k.lower() == b"authorization"), b"")
        # Constant time: how long a refusal takes says nothing of how close the guess was.
        return hmac.compare_digest(given, self._expected)


def _guarded(path: str) -> bool:
    return path == _GUARDED_PREFIX or path.startswith(_GUARDED_PREFIX + "/")
