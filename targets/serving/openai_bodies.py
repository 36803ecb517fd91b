"""The OpenAI request bodies the reference target reads, and their parsing.

The bodies are pydantic models in strict mode (a string where a number belongs is an
error, not a conversion), so a benchmark never measures something other than it asked
for. Unknown fields are ignored, as vLLM does, except those in ``_NEUTRAL``: the server
cannot honour them, so any value but their neutral one is refused with HTTP 400.

Apart from ``openai_request.py`` (a parsed body checked against the served model and
turned into an engine job): these are the wire's shapes, which ``openapi.py`` publishes
too.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from moeperf.targets.openai_wire import BadRequest

MAX_LOGPROBS = 20  # vLLM's default max_logprobs, and OpenAI's top_logprobs limit
_SEED_LIMIT = 2**63  # seeds are torch generator seeds: int64


class _Body(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")


class StreamOptions(_Body):
    include_usage: bool | None = False
    continuous_usage_stats: bool | None = False  # vLLM's extension: usage on every chunk


class Generation(_Body):
    """Fields common to both APIs."""

    model: str | None = None
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    seed: int | None = Field(None, ge=0, lt=_SEED_LIMIT)
    n: int | None = 1
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None  # vLLM's extension
    ignore_eos: bool | None = False  # vLLM's extension: generate exactly max_tokens
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    # vLLM's extension: tokens in logprobs as "token_id:ID", not their text.
    return_tokens_as_token_ids: bool | None = False


class CompletionRequest(Generation):
    """POST /v1/completions. ``prompt``: a string or token ids (a batch of one is too)."""

    prompt: str | list[int] | list[str] | list[list[int]]
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    echo: bool | None = False  # the prompt first in the text (and in the logprobs)
    prompt_logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)  # vLLM's extension


class TextPart(_Body):
    type: Literal["text"]
    text: str


class Message(_Body):
    role: Literal["system", "user", "assistant"]  # the roles the chat template knows
    content: str | list[TextPart] | None = None
    name: str | None = None


class ChatRequest(Generation):
    """POST /v1/chat/completions."""

    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool | None = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)


class TokenizeRequest(_Body):
    """vLLM's POST /tokenize: a prompt or chat messages."""

    model: str | None = None
    prompt: str | None = None
    messages: list[Message] | None = None
    add_generation_prompt: bool | None = True


class DetokenizeRequest(_Body):
    """vLLM's POST /detokenize."""

    model: str | None = None
    tokens: list[int]


# Fields the server cannot honour -> their neutral values (anything else is a 400). echo
# and prompt_logprobs are fields of completions; chat cannot honour them.
_NEUTRAL: dict[str, tuple[Any, ...]] = {
    "echo": (None, False),
    "best_of": (None, 1),
    "suffix": (None, ""),
    "logit_bias": (None, {}),
    "presence_penalty": (None, 0),
    "frequency_penalty": (None, 0),
    "repetition_penalty": (None, 1),
    "top_k": (None, 0, -1),
    "min_p": (None, 0),
    "min_tokens": (None, 0),
    "use_beam_search": (None, False),
    "prompt_logprobs": (None,),
    "include_stop_str_in_output": (None, False),
    "tools": (None, []),
    "functions": (None, []),
    "response_format": (None, {"type": "text"}),
    "guided_json": (None,),
    "guided_regex": (None,),
    "guided_choice": (None,),
    "guided_grammar": (None,),
    "structured_outputs": (None,),
    "continue_final_message": (None, False),
    "chat_template": (None,),
}

M = TypeVar("M", bound=BaseModel)


def parse_body(model: type[M], raw: bytes) -> M:
    """Validate a JSON body; a ``BadRequest`` names the first bad field."""
    try:
        body = model.model_validate_json(raw or b"null")
    except ValidationError as exc:
        raise _bad_request(exc) from None
    for name, value in (body.model_extra or {}).items():
        neutral = _NEUTRAL.get(name)
        if neutral is not None and not _is_neutral(value, neutral):
            raise BadRequest(f"'{name}' is not supported (leave it out); got {value!r:.80}", name)
    return body


def _is_neutral(value: Any, neutral: tuple[Any, ...]) -> bool:
    # 0 == False in Python, but JSON tells them apart: a boolean matches only a boolean.
    return any(isinstance(value, bool) == isinstance(n, bool) and value == n for n in neutral)


def _is_union_tag(part: str | int) -> bool:
    # pydantic puts the union member tried into the location: prompt.list[int].0
    return isinstance(part, str) and ("[" in part or part in ("str", "int", "float", "bool"))


def _bad_request(exc: ValidationError) -> BadRequest:
    errors = exc.errors()
    first = errors[0]
    if first["type"] == "json_invalid":
        return BadRequest(f"request body is not valid JSON: {first['msg']}")
    if not first["loc"]:
        return BadRequest(f"request body must be a JSON object: {first['msg']}")
    loc = first["loc"]
    union_at = next((i for i, part in enumerate(loc) if _is_union_tag(part)), None)
    if union_at is not None:  # a value none of a union's types took: name those types
        field = tuple(loc[:union_at])
        tags = dict.fromkeys(
            e["loc"][union_at]
            for e in errors
            if tuple(e["loc"][:union_at]) == field and len(e["loc"]) > union_at
        )
        where = ".".join(str(part) for part in field)
        message = f"{where}: must be one of {', '.join(str(t) for t in tags)}"
        if len(loc) == union_at + 1:  # the error is about the whole value
            message += f"; got {first['input']!r:.80}"
        return BadRequest(message, str(field[0]) if field else None)
    where = ".".join(str(part) for part in loc)
    return BadRequest(f"{where}: {first['msg']}", str(loc[0]))
