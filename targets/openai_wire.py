"""What both targets' OpenAI-compatible APIs share on the wire: SSE framing, the end of a
stream, the error object and the errors that answer with it, the usage object, the
model card of ``GET /v1/models``, and ``WireVariant``: the switches that make a target
stream as the other common servers do.

The shapes are vLLM's, which OpenAI clients and benchmark tools read:
``{"error": {"message", "type", "param", "code"}}`` with ``code`` the HTTP status.
``WireVariant.shape`` is the one place that decides, per response, what a stream sends
besides its tokens (role chunk, where usage goes, ``[DONE]``); both targets follow it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, get_args

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


# -- how a server's stream differs from another's -----------------------------------------

UsageMode = Literal["as_requested", "end_only", "never"]
USAGE_MODES: tuple[UsageMode, ...] = get_args(UsageMode)

# The request fields OpenAI documents (API reference: Create chat completion, Create
# completion, the stream_options object); a strict server refuses every other one.
CHAT_FIELDS = frozenset(
    {"messages", "model", "audio", "frequency_penalty", "function_call", "functions",
     "logit_bias", "logprobs", "max_completion_tokens", "max_tokens", "metadata",
     "modalities", "n", "parallel_tool_calls", "prediction", "presence_penalty",
     "prompt_cache_key", "reasoning_effort", "response_format", "safety_identifier", "seed",
     "service_tier", "stop", "store", "stream", "stream_options", "temperature",
     "tool_choice", "tools", "top_logprobs", "top_p", "user", "verbosity",
     "web_search_options"}
)  # fmt: skip
COMPLETION_FIELDS = frozenset(
    {"model", "prompt", "best_of", "echo", "frequency_penalty", "logit_bias", "logprobs",
     "max_tokens", "n", "presence_penalty", "seed", "stop", "stream", "stream_options",
     "suffix", "temperature", "top_p", "user"}
)  # fmt: skip
STREAM_OPTION_FIELDS = frozenset({"include_usage", "include_obfuscation"})


class UnknownFields(ApiError):
    """Fields outside OpenAI's documented ones, refused as a strict server does: HTTP 422
    with FastAPI's pydantic-style ``detail``, one entry per field."""

    status = 422

    def __init__(self, locations: Sequence[tuple[str, ...]], inputs: Sequence[object]) -> None:
        named = ", ".join(".".join(loc) for loc in locations)
        super().__init__(f"unknown request field(s): {named}", ".".join(locations[0]))
        self.locations = tuple(locations)
        self.inputs = tuple(inputs)

    def body(self) -> bytes:
        detail = [
            {"type": "extra_forbidden", "loc": ["body", *loc],
             "msg": "Extra inputs are not permitted", "input": value}
            for loc, value in zip(self.locations, self.inputs, strict=True)
        ]  # fmt: skip
        return json.dumps({"detail": detail}, separators=(",", ":")).encode()


def unknown_fields(body: Mapping[str, Any], *, chat: bool) -> list[tuple[tuple[str, ...], Any]]:
    """The (location, value) of every field of ``body`` OpenAI does not document: the
    body's own fields first, in their order, then those of ``stream_options`` (pydantic
    would list those first; a client reading the first one should meet what it set at the
    top, such as ``ignore_eos``, before an option inside an object it did ask for)."""
    known = CHAT_FIELDS if chat else COMPLETION_FIELDS
    found: list[tuple[tuple[str, ...], Any]] = [
        ((name,), value) for name, value in body.items() if name not in known
    ]
    options = body.get("stream_options")
    if isinstance(options, Mapping):
        found += [
            (("stream_options", name), value)
            for name, value in options.items()
            if name not in STREAM_OPTION_FIELDS
        ]
    return found


def json_or_none(raw: bytes) -> object:
    """``raw`` as JSON, or None when it is not JSON (for the request parser to refuse)."""
    try:
        return json.loads(raw)
    except ValueError:  # UnicodeDecodeError is one too
        return None


@dataclass(frozen=True, slots=True)
class StreamShape:
    """What one response sends besides its tokens, decided by ``WireVariant.shape``.

    Usage is cumulative wherever it appears; ``usage_on(finished)`` says whether a token
    chunk carries it (``finished``: the chunk with the finish_reason).
    """

    role_chunk: bool  # chat: a first chunk with the role and no token, sent at once
    usage_every_chunk: bool  # vLLM's continuous_usage_stats (the role chunk too)
    usage_on_finish: bool  # on the finish_reason chunk (TGI, transformers serve)
    usage_chunk: bool  # a chunk of its own after the tokens, "choices": [] (OpenAI)
    usage_in_body: bool  # in a non-streamed body
    done: bool  # data: [DONE] last

    def usage_on(self, finished: bool) -> bool:
        """Whether a token chunk carries usage."""
        return self.usage_every_chunk or (finished and self.usage_on_finish)


class WireSwitches(Protocol):
    """A target config that carries the four switches (both targets' configs do)."""

    @property
    def send_done(self) -> bool: ...
    @property
    def usage(self) -> UsageMode: ...
    @property
    def role_chunk(self) -> bool: ...
    @property
    def reject_unknown_fields(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class WireVariant:
    """How a target's OpenAI API behaves where real servers differ; the default is vLLM's.

    ``send_done``: False ends a stream after its finish_reason chunk, without
    ``data: [DONE]`` (transformers serve, some gateways). ``usage``: "as_requested" honours
    ``stream_options`` (``include_usage``, vLLM's ``continuous_usage_stats``); "end_only"
    puts usage, when asked for, on the finish_reason chunk alone, whatever
    ``continuous_usage_stats`` says (SGLang, TGI, transformers serve); "never" sends none,
    not even in a whole body (old llama.cpp). ``role_chunk``: chat streams start with a
    role-only chunk (vLLM, SGLang, transformers serve); False: the first chunk carries the
    first token. ``reject_unknown_fields``: a generation request with a field OpenAI does
    not document (``ignore_eos``, ``min_tokens``, ``top_k``,
    ``stream_options.continuous_usage_stats``, ...) is refused with HTTP 422 (TGI, strict
    servers); otherwise each target reads the fields it knows.
    """

    send_done: bool = True
    usage: UsageMode = "as_requested"
    role_chunk: bool = True
    reject_unknown_fields: bool = False

    @classmethod
    def of(cls, config: WireSwitches) -> WireVariant:
        """The variant a target's config asks for."""
        return cls(
            send_done=config.send_done,
            usage=config.usage,
            role_chunk=config.role_chunk,
            reject_unknown_fields=config.reject_unknown_fields,
        )

    def shape(self, *, chat: bool, include_usage: bool, continuous_usage: bool) -> StreamShape:
        """The shape of one response to a request with these ``stream_options``."""
        as_requested = self.usage == "as_requested"
        return StreamShape(
            role_chunk=chat and self.role_chunk,
            usage_every_chunk=as_requested and continuous_usage,
            usage_on_finish=self.usage == "end_only" and include_usage,
            usage_chunk=as_requested and include_usage,
            usage_in_body=self.usage != "never",
            done=self.send_done,
        )

    def check_fields(self, body: object, *, chat: bool) -> None:
        """``UnknownFields`` if this variant refuses them and ``body`` has any; a body that
        is not a JSON object is left to the request's own parser to refuse."""
        if not self.reject_unknown_fields or not isinstance(body, Mapping):
            return
        found = unknown_fields(body, chat=chat)
        if found:
            raise UnknownFields([loc for loc, _ in found], [value for _, value in found])
