"""Reading OpenAI request bodies into what the engine runs: validated, tokenized, bounded.

The bodies and their strict parsing are ``openai_bodies.py``; here a parsed body is
checked against the served model (its name, context and vocabulary) and becomes a
``GenerationJob``.

Prompt log-probabilities come two ways on /v1/completions, as vLLM offers them: OpenAI's
legacy ``echo`` (with ``logprobs: k``, the response's logprobs start with the prompt's
tokens, the first one's logprob null) and vLLM's ``prompt_logprobs: k`` (a list in the
choice). ``return_tokens_as_token_ids`` (vLLM's) names tokens "token_id:ID" in logprobs,
so a client gets the exact ids back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol, cast

from moeperf.targets import openai_wire
from moeperf.targets.openai_wire import BadRequest
from moeperf.targets.serving.engine.api import SamplingParams
from moeperf.targets.serving.engine.validation import MIN_TEMPERATURE
from moeperf.targets.serving.openai_bodies import (
    ChatRequest,
    CompletionRequest,
    Generation,
    Message,
    TextPart,
    parse_body,
)

# Every generated token is checked against every stop string (on the event loop) and
# every stop token id, so their number is bounded. OpenAI's API takes up to 4 stop
# sequences, vLLM any number; 16 runs what either accepts in practice.
MAX_STOP_STRINGS = 16
MAX_STOP_TOKEN_IDS = 64


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
    body: Generation,
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
