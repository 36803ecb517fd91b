"""The reference target's published OpenAPI document (``GET /openapi.json``).

The handlers read their bodies raw and validate them with the request models of
``openai_bodies.py`` (strict, with OpenAI-shaped errors), so FastAPI alone would publish
no request bodies and only a 200 per route. This fills the document in from the same
models and from what the server really answers: each body's JSON schema, the success
content types (JSON, or SSE for a stream; Prometheus text for /metrics; nothing for
/health) and the errors, all in OpenAI's error shape. Tools that generate requests from
the document (schemathesis, in tests/integration/test_schemathesis_reference.py) then
exercise the real validation, and check the answers against it.

Limits that depend on the model (context length, vocabulary) cannot be in a static schema:
a schema-valid request may still be refused with a 4xx naming the limit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from moeperf.targets.serving.openai_bodies import (
    ChatRequest,
    CompletionRequest,
    DetokenizeRequest,
    TokenizeRequest,
)

if TYPE_CHECKING:
    from fastapi import FastAPI

_REF = "#/components/schemas/{model}"
_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["integer", "null"]},
            },
        }
    },
}
_USAGE = {
    "type": "object",
    "required": ["prompt_tokens", "completion_tokens", "total_tokens"],
    "properties": {
        "prompt_tokens": {"type": "integer", "minimum": 0},
        "completion_tokens": {"type": "integer", "minimum": 0},
        "total_tokens": {"type": "integer", "minimum": 0},
    },
}


def _generation(kind: str) -> dict[str, Any]:
    """A whole (non-streamed) completion or chat completion body."""
    return {
        "type": "object",
        "required": ["id", "object", "created", "model", "choices"],
        "properties": {
            "id": {"type": "string"},
            "object": {"const": kind},
            "created": {"type": "integer"},
            "model": {"type": "string"},
            "choices": {
                "type": "array",
                "minItems": 1,
                "items": {"type": "object", "required": ["index", "finish_reason"]},
            },
            "usage": _USAGE,
        },
    }


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _error(description: str) -> dict[str, Any]:
    return _json({"$ref": _REF.format(model="ErrorResponse")}, description)


# Errors any route with a JSON body may answer.
_BODY_ERRORS = {
    "400": _error("The body is not valid JSON, or a field is wrong (the message names it)"),
    "404": _error("The model named is not the one served"),
    "408": _error("The body did not arrive within body_read_timeout_s"),
    "413": _error("The body is larger than max_body_bytes"),
}
_GENERATION_ERRORS = {
    **_BODY_ERRORS,
    "429": _error("The engine's waiting queue is full; retry later"),
}


def _request_body(model: type[BaseModel]) -> dict[str, Any]:
    schema = {"$ref": _REF.format(model=model.__name__)}
    return {"required": True, "content": {"application/json": {"schema": schema}}}


def _generation_ok(kind: str) -> dict[str, Any]:
    return {
        "description": "The whole response, or with 'stream': true its server-sent events",
        "content": {
            "application/json": {"schema": _generation(kind)},
            "text/event-stream": {"schema": {"type": "string"}},
        },
    }


_TOKENIZED = {
    "type": "object",
    "required": ["tokens", "count", "max_model_len"],
    "properties": {
        "tokens": {"type": "array", "items": {"type": "integer"}},
        "count": {"type": "integer", "minimum": 0},
        "max_model_len": {"type": "integer"},
    },
}
_DETOKENIZED = {
    "type": "object",
    "required": ["prompt"],
    "properties": {"prompt": {"type": "string"}},
}
_RESET = {
    "type": "object",
    "required": ["reset", "dropped_blocks"],
    "properties": {"reset": {"type": "boolean"}, "dropped_blocks": {"type": "integer"}},
}
_MODELS = {
    "type": "object",
    "required": ["object", "data"],
    "properties": {
        "object": {"const": "list"},
        "data": {"type": "array", "items": {"type": "object", "required": ["id", "object"]}},
    },
}

# (path, method) -> (request model or None, responses)
_OPERATIONS: dict[tuple[str, str], tuple[type[BaseModel] | None, dict[str, Any]]] = {
    ("/v1/completions", "post"): (
        CompletionRequest,
        {"200": _generation_ok("text_completion"), **_GENERATION_ERRORS},
    ),
    ("/v1/chat/completions", "post"): (
        ChatRequest,
        {"200": _generation_ok("chat.completion"), **_GENERATION_ERRORS},
    ),
    ("/tokenize", "post"): (
        TokenizeRequest,
        {"200": _json(_TOKENIZED, "The prompt's token ids"), **_BODY_ERRORS},
    ),
    ("/detokenize", "post"): (
        DetokenizeRequest,
        {"200": _json(_DETOKENIZED, "The ids' text"), **_BODY_ERRORS},
    ),
    ("/v1/models", "get"): (None, {"200": _json(_MODELS, "The served model")}),
    ("/health", "get"): (None, {"200": {"description": "Serving (no body)"}}),
    ("/metrics", "get"): (
        None,
        {
            "200": {
                "description": "Prometheus text exposition",
                "content": {"text/plain": {"schema": {"type": "string"}}},
            }
        },
    ),
    ("/reset_prefix_cache", "post"): (None, {"200": _json(_RESET, "Cached blocks dropped")}),
}


def document(app: FastAPI, *, api_key: bool, strict_fields: bool) -> None:
    """Make ``app`` publish the filled-in document: with ``api_key`` its /v1 routes may
    answer 401; with ``strict_fields`` (``reject_unknown_fields``) its generation routes
    422 in FastAPI's own shape."""
    from fastapi.openapi.utils import get_openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
            _fill(schema, api_key=api_key, strict_fields=strict_fields)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented override


def _fill(schema: dict[str, Any], *, api_key: bool, strict_fields: bool) -> None:
    requests: tuple[type[BaseModel], ...] = (
        CompletionRequest,
        ChatRequest,
        TokenizeRequest,
        DetokenizeRequest,
    )
    _, defs = models_json_schema([(m, "validation") for m in requests], ref_template=_REF)
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components.update(defs.get("$defs", {}))
    components["ErrorResponse"] = _ERROR
    for (path, method), (model, responses) in _OPERATIONS.items():
        operation = schema["paths"][path][method]
        operation["responses"] = dict(responses)
        if model is not None:
            operation["requestBody"] = _request_body(model)
        if api_key and path.startswith("/v1/"):
            operation["responses"]["401"] = _error("Missing or wrong API key")
        if strict_fields and model in (CompletionRequest, ChatRequest):
            operation["responses"]["422"] = _json(
                {"type": "object", "required": ["detail"]}, "A field OpenAI does not document"
            )
