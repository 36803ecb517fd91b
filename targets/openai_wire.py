"""What both targets' OpenAI-compatible APIs share on the wire: SSE framing, the end of a
stream, the error object and the errors that answer with it, the usage object and the
model card of ``GET /v1/models``.

The shapes are vLLM's, which OpenAI clients and benchmark tools read:
``{"error": {"message", "type", "param", "code"}}`` with ``code`` the HTTP status.
"""

from __future__ import annotations

import json
from typing import Any

DONE_EVENT = b"data: [DONE]\n\n"


def sse_event(data: bytes) -> bytes:
    """One server-sent event: ``data: <data>`` and a blank line."""
    return b"data: " + data + b"\n\n"


def error_body(message: str, *, kind: str, code: int, param: str | None = None) -> bytes:
    """``{"error": {"message", "type", "param", "code"}}`` as compact JSON."""
    error = {"message": message, "type": kind, "param": param, "code": code}
    return json.dumps({"error": error}, separators=(",", ":")).encode()


class ApiError(Exception):
    """A request a target refuses; answered as an OpenAI error with HTTP ``status``."""

    status = 400
    kind = "invalid_request_error"  # OpenAI's error "type"

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param

    def body(self) -> bytes:
        """This error's OpenAI error object."""
        return error_body(self.message, kind=self.kind, param=self.param, code=self.status)


class BadRequest(ApiError):
    """Malformed JSON, a wrong type, a value out of range, something unsupported: 400."""


class ModelNotFound(ApiError):
    """The request names a model this server does not serve: 404, as vLLM answers."""

    status = 404
    kind = "model_not_found"


def check_model(served: str, asked: object) -> None:
    """``ModelNotFound`` unless ``asked`` is ``served`` (absent: the served model, as vLLM)."""
    if asked is not None and asked != served:
        raise ModelNotFound(
            f"The model `{asked}` does not exist; this server serves `{served}`.", "model"
        )


def usage_json(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    """OpenAI's usage object."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def models_list(name: str, max_model_len: int) -> dict[str, Any]:
    """The body of ``GET /v1/models``: one model, with vLLM's ``max_model_len``."""
    card = {
        "id": name,
        "object": "model",
        "created": 0,
        "owned_by": "moeperf",
        "root": name,
        "parent": None,
        "max_model_len": max_model_len,
    }
    return {"object": "list", "data": [card]}
