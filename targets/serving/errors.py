"""The serving target's errors: its own root, the one HTTP error only it answers with
(429), and the handlers that answer every error in OpenAI's shape.

The errors a request is refused with are the targets' shared ``ApiError``s
(``targets/openai_wire.py``), which carry what the OpenAI error object needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from moeperf.targets.openai_wire import ApiError, error_body

if TYPE_CHECKING:
    from fastapi import FastAPI, Request
    from fastapi.responses import Response


class ServingError(Exception):
    """Root of the serving target's own errors (the engine's have ``EngineError``)."""


class ReferenceConfigError(ServingError, ValueError):
    """A ``ReferenceTargetConfig`` field is missing, unknown or out of range."""


class Overloaded(ApiError):
    """The engine's waiting queue is full: 429, so load generators can tell it apart."""

    status = 429
    kind = "rate_limit_exceeded"


def error_response(status: int, message: str, kind: str, param: str | None = None) -> Response:
    """An OpenAI error object with HTTP ``status``."""
    # FastAPI is imported when used: the harness imports this module (through config.py)
    # to validate a config, and should not pay for a web framework it does not run.
    from fastapi.responses import Response

    body = error_body(message, kind=kind, param=param, code=status)
    return Response(body, status_code=status, media_type="application/json")


def install_error_handlers(app: FastAPI) -> None:
    """Answer ``ApiError``s, and FastAPI's and Starlette's own errors, as OpenAI errors."""
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException

    async def api_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        # The error's own body: an OpenAI error object, or FastAPI's 422 detail of a strict
        # server (openai_wire.UnknownFields).
        from fastapi.responses import Response

        return Response(exc.body(), status_code=exc.status, media_type="application/json")

    async def validation_error(request: Request, exc: Exception) -> Response:
        # FastAPI answers 422 in its own shape; OpenAI clients expect 400 and an error object.
        assert isinstance(exc, RequestValidationError)
        first = exc.errors()[0] if exc.errors() else {"msg": "invalid request", "loc": ()}
        loc = [str(part) for part in first.get("loc", ()) if part != "body"]
        message = f"{'.'.join(loc)}: {first['msg']}" if loc else str(first["msg"])
        return error_response(400, message, "invalid_request_error", loc[0] if loc else None)

    async def http_error(request: Request, exc: Exception) -> Response:
        # Unknown paths (404) and methods (405).
        assert isinstance(exc, HTTPException)
        kind = "not_found" if exc.status_code == 404 else "invalid_request_error"
        return error_response(exc.status_code, str(exc.detail), kind)

    async def internal_error(request: Request, exc: Exception) -> Response:
        message = f"internal error: {type(exc).__name__}: {exc}"
        return error_response(500, message, "server_error")

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(Exception, internal_error)
