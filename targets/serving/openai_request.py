"""Reading OpenAI request bodies into what the engine runs: validated, tokenized, bounded.

The bodies are pydantic models in strict mode (a string where a number belongs is an
error, not a conversion), so a benchmark never measures something other than it asked
for. Unknown fields are ignored, as vLLM does, except those in ``_NEUTRAL``: the server
cannot honour them, so any value but their neutral one is refused with HTTP 400.

Prompt log-probabilities come two ways on /v1/completions, as vLLM offers them: OpenAI's
legacy ``echo`` (with ``logprobs: k``, the response's logprobs start with the prompt's
tokens, the first one's logprob null) and vLLM's ``prompt_logprobs: k`` (a list in the
choice). ``return_tokens_as_token_ids`` (vLLM's) names tokens "token_id:ID" in logprobs,
so a client gets the exact ids back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol, TypeVar, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from moeperf.targets import openai_wire
from moeperf.targets.openai_wire import BadRequest
from moeperf.targets.serving.engine.api import SamplingParams
from moeperf.targets.serving.engine.validation import MIN_TEMPERATURE

MAX_LOGPROBS = 20  # vLLM's default max_logprobs, and OpenAI's top_logprobs limit
# Every generated token is checked against every stop string (on the event loop) and
# every stop token id, so their number is bounded. OpenAI's API takes up to 4 stop
# sequences, vLLM any number; 16 runs what either accepts in practice.
MAX_STOP_STRINGS = 16
MAX_STOP_TOKEN_IDS = 64
_SEED_LIMIT = 2**63  # seeds are torch generator seeds: int64


class Tokenizer(Protocol):
    """What the server needs of ``targets.model.tokenizer.ChatTokenizer``."""

    @property
    def vocab_size(self) -> int: ...
    @property
    def stop_token_ids(self) -> tuple[int, ...]: ...
    def encode(self, text: str) -> list[int]: ...
    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str: ...
    def apply_chat_template(
        self, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool = True
    ) -> list[int]: ...


@dataclass(frozen=True)
class ServedModel:
    """The model as requests see it: its name, context limit and vocabulary.

    ``max_token_chars`` is the longest token's text (its vocabulary string, which covers
    at most that many characters): a text longer than ``max_context_len`` times it cannot
    fit the context, and is refused before it is tokenized. Tokenizing holds the event
    loop (the GIL; about 2 s per MB on a small CPU), so an oversized prompt must not get
    that far. None: no such check.
    """

    name: str
    max_context_len: int
    tokenizer: Tokenizer
    max_token_chars: int | None = None

    def check_text_fits(self, chars: int, param: str) -> None:
        """BadRequest if a text of ``chars`` characters cannot fit the context."""
        if self.max_token_chars is None:
            return
        shortest = -(-chars // self.max_token_chars)  # tokens at the least
        if shortest > self.max_context_len:
            raise BadRequest(
                f"This model's maximum context length is {self.max_context_len} tokens. "
                f"However, the {param} ({chars} characters) is at least {shortest} tokens. "
                f"Please reduce the length of the {param}.",
                param,
            )


class _Body(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")


class StreamOptions(_Body):
    include_usage: bool | None = False
    continuous_usage_stats: bool | None = False  # vLLM's extension: usage on every chunk


class _Generation(_Body):
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


class CompletionRequest(_Generation):
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


class ChatRequest(_Generation):
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


def check_model(served: ServedModel, asked: str | None) -> None:
    """404 unless ``asked`` is the served name (absent: the served model, as vLLM does)."""
    openai_wire.check_model(served.name, asked)


def chat_prompt(
    served: ServedModel, messages: Sequence[Message], add_generation_prompt: bool = True
) -> list[int]:
    """The chat template's token ids for ``messages`` (their text checked first: see
    ``ServedModel.max_token_chars``)."""
    turns = [{"role": m.role, "content": _text(m.content)} for m in messages]
    served.check_text_fits(sum(len(turn["content"]) for turn in turns), "messages")
    return list(served.tokenizer.apply_chat_template(turns, add_generation_prompt))


def _text(content: str | list[TextPart] | None) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    return "\n".join(part.text for part in content)  # vLLM joins text parts with newlines


def completion_prompt(served: ServedModel, prompt: CompletionRequest) -> list[int]:
    """The prompt's token ids; ids given are checked against the vocabulary."""
    value = prompt.prompt
    if isinstance(value, list) and value and isinstance(value[0], str | list):
        if len(value) != 1:
            raise BadRequest("batches of prompts are not supported: give one prompt", "prompt")
        value = value[0]
    if isinstance(value, str):
        served.check_text_fits(len(value), "prompt")
        return served.tokenizer.encode(value)
    # What is left is one prompt of token ids (the model's type allows nothing else).
    ids = cast(list[int], value)
    vocab = served.tokenizer.vocab_size
    bad = next((t for t in ids if not 0 <= t < vocab), None)
    if bad is not None:
        raise BadRequest(f"prompt token id {bad} is outside the vocabulary [0, {vocab})", "prompt")
    return list(ids)


@dataclass(frozen=True)
class GenerationJob:
    """A validated generation request: what to run and how to answer."""

    chat: bool
    prompt_ids: list[int]
    params: SamplingParams
    stop: tuple[str, ...]
    stream: bool
    include_usage: bool
    continuous_usage: bool  # usage on every chunk (vLLM's continuous_usage_stats)
    logprobs: bool
    # Completions' echo: the prompt's text first (None: no echo), and with logprobs its
    # tokens first in them (params.prompt_logprobs then asks the engine for them).
    echo_text: str | None = None
    prompt_logprobs: int | None = None  # vLLM's prompt_logprobs list: its top n
    tokens_as_ids: bool = False  # return_tokens_as_token_ids


def completion_job(served: ServedModel, raw: bytes) -> GenerationJob:
    """Parse and check a /v1/completions body."""
    body = parse_body(CompletionRequest, raw)
    check_model(served, body.model)
    prompt = completion_prompt(served, body)
    # OpenAI's legacy default: 16 tokens.
    max_tokens = body.max_tokens if body.max_tokens is not None else 16
    job = _job(served, body, prompt, max_tokens, logprobs=body.logprobs, chat=False)
    return _with_prompt_logprobs(served, body, job)


def _with_prompt_logprobs(
    served: ServedModel, body: CompletionRequest, job: GenerationJob
) -> GenerationJob:
    """``job`` with echo and prompt_logprobs: the engine computes the prompt's logprobs
    with the larger top n either asks for."""
    if body.prompt_logprobs is not None and body.stream:
        # As vLLM: a streamed choice has no prompt_logprobs field to carry them.
        raise BadRequest(
            "'prompt_logprobs' is not available with 'stream': true", "prompt_logprobs"
        )
    echo_text = _prompt_text(served, body, job.prompt_ids) if body.echo else None
    echoed = body.logprobs if body.echo else None
    wanted = [n for n in (body.prompt_logprobs, echoed) if n is not None]
    params = replace(job.params, prompt_logprobs=max(wanted) if wanted else None)
    return replace(job, params=params, echo_text=echo_text, prompt_logprobs=body.prompt_logprobs)


def _prompt_text(served: ServedModel, body: CompletionRequest, ids: list[int]) -> str:
    """The prompt as echoed: the text given, else its token ids decoded."""
    value = body.prompt
    if isinstance(value, list) and value and isinstance(value[0], str):
        value = value[0]
    return value if isinstance(value, str) else served.tokenizer.decode(ids)


def chat_job(served: ServedModel, raw: bytes) -> GenerationJob:
    """Parse and check a /v1/chat/completions body."""
    body = parse_body(ChatRequest, raw)
    check_model(served, body.model)
    prompt = chat_prompt(served, body.messages)
    # max_tokens first, as vLLM reads them; neither: the rest of the context, as vLLM does.
    max_tokens = body.max_tokens or body.max_completion_tokens
    if max_tokens is None:
        max_tokens = max(1, served.max_context_len - len(prompt))
    if body.top_logprobs is not None and not body.logprobs:
        raise BadRequest("'top_logprobs' needs 'logprobs': true", "top_logprobs")
    logprobs = (body.top_logprobs or 0) if body.logprobs else None
    return _job(served, body, prompt, max_tokens, logprobs=logprobs, chat=True)


def _job(
    served: ServedModel,
    body: _Generation,
    prompt: list[int],
    max_tokens: int,
    *,
    logprobs: int | None,
    chat: bool,
) -> GenerationJob:
    if body.n not in (None, 1):
        raise BadRequest(f"only n=1 is supported, got {body.n}", "n")
    prompt_param = "messages" if chat else "prompt"
    if not prompt:
        raise BadRequest("the prompt is empty: it must have at least one token", prompt_param)
    limit = served.max_context_len
    if len(prompt) + max_tokens > limit:
        param = "max_tokens" if len(prompt) < limit else prompt_param
        raise BadRequest(
            f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{len(prompt) + max_tokens} tokens ({len(prompt)} in the {prompt_param}, "
            f"{max_tokens} in the completion). Please reduce the length of the "
            f"{prompt_param} or completion.",
            param,
        )
    stop = (body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ())
    if len(stop) > MAX_STOP_STRINGS:
        raise BadRequest(
            f"at most {MAX_STOP_STRINGS} stop strings are supported, got {len(stop)}", "stop"
        )
    if any(not s for s in stop):
        raise BadRequest("stop strings must not be empty", "stop")
    vocab = served.tokenizer.vocab_size
    stop_ids = tuple(body.stop_token_ids or ())
    if len(stop_ids) > MAX_STOP_TOKEN_IDS:
        raise BadRequest(
            f"at most {MAX_STOP_TOKEN_IDS} stop_token_ids are supported, got {len(stop_ids)}",
            "stop_token_ids",
        )
    if any(not 0 <= t < vocab for t in stop_ids):
        raise BadRequest(f"stop_token_ids must be in [0, {vocab})", "stop_token_ids")
    options = body.stream_options
    if options is not None and not body.stream:
        raise BadRequest("'stream_options' is only allowed with 'stream': true", "stream_options")
    temperature = 1.0 if body.temperature is None else body.temperature
    if temperature < MIN_TEMPERATURE:  # as vLLM: greedy (dividing by it overflows)
        temperature = 0.0
    params = SamplingParams(
        max_tokens=max_tokens,
        temperature=temperature,
        top_p=1.0 if body.top_p is None else body.top_p,
        seed=body.seed,
        stop_token_ids=stop_ids,
        ignore_eos=bool(body.ignore_eos),
        logprobs=logprobs,
    )
    return GenerationJob(
        chat=chat,
        prompt_ids=prompt,
        params=params,
        stop=stop,
        stream=bool(body.stream),
        include_usage=bool(options and options.include_usage),
        continuous_usage=bool(options and options.continuous_usage_stats),
        logprobs=logprobs is not None,
        tokens_as_ids=bool(body.return_tokens_as_token_ids),
    )
