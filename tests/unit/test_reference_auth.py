"""The reference target's API key (targets/serving/auth.py): where it comes from, and the
middleware that guards /v1/* with it, called as an ASGI server calls it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import MutableMapping
from typing import Any

import pytest

from moeperf.targets.serving.__main__ import EXIT_USAGE, main
from moeperf.targets.serving.auth import ENV_VAR, ApiKeyMiddleware, api_key
from moeperf.targets.serving.errors import ReferenceConfigError

KEY = "sk-moeperf-unit-9e1b"


async def _inner(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"served"})


def call(path: str, authorization: bytes | None = None) -> tuple[int, dict, bytes]:
    """(status, headers, body) of one GET through the middleware."""
    headers = [(b"host", b"127.0.0.1")]
    if authorization is not None:
        headers.append((b"authorization", authorization))
    scope = {"type": "http", "method": "GET", "path": path, "headers": headers}
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> MutableMapping[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    asyncio.run(ApiKeyMiddleware(_inner, KEY)(scope, receive, send))
    start, body = sent[0], b"".join(m.get("body", b"") for m in sent[1:])
    return start["status"], dict(start["headers"]), body


@pytest.mark.parametrize("path", ["/v1/models", "/v1/completions", "/v1/chat/completions"])
@pytest.mark.parametrize(
    "authorization", [None, b"", f"Bearer {KEY}x".encode(), KEY.encode(), b"Bearer "]
)
def test_v1_without_the_key_is_a_401_openai_error_that_shows_no_key(path, authorization):
    status, headers, body = call(path, authorization)
    assert status == 401 and headers[b"www-authenticate"] == b"Bearer"
    error = json.loads(body)["error"]
    assert error["type"] == "authentication_error" and error["code"] == 401
    assert KEY not in body.decode()


@pytest.mark.parametrize("path", ["/v1/models", "/v1/completions"])
def test_v1_with_the_key_is_served(path):
    assert call(path, f"Bearer {KEY}".encode())[::2] == (200, b"served")


@pytest.mark.parametrize("path", ["/health", "/metrics", "/tokenize", "/v1x"])
def test_routes_outside_v1_stay_open(path):
    assert call(path)[::2] == (200, b"served")


def test_the_key_comes_from_the_flag_else_the_environment():
    assert api_key(KEY, {ENV_VAR: "other"}) == KEY
    assert api_key(None, {ENV_VAR: KEY}) == KEY
    assert api_key(None, {ENV_VAR: ""}) is None
    assert api_key(None, {}) is None
    with pytest.raises(ReferenceConfigError, match="--api-key: the key is empty"):
        api_key("", {})


def test_an_empty_api_key_flag_exits_2_before_the_model_loads(capsys):
    assert main(["--api-key", "", "--port", "0"]) == EXIT_USAGE
    assert "--api-key: the key is empty" in capsys.readouterr().err
