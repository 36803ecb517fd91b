"""The target side: the prompt set sent to the target's /v1/completions, greedy, with
top-k logprobs and token ids; and the held-out text's prompt logprobs.

Every request is whole (not streamed), its prompt token ids, ``temperature`` 0,
``logprobs`` k and vLLM's ``return_tokens_as_token_ids`` (tokens come back as
"token_id:ID", so the ids are exact), plus ``ignore_eos`` when the spec asks (every
output then has the same length). The first request is sent alone: a field the target
refuses (HTTP 400 or 422 naming it) is left out of every request after, and the run says
so; a target with no /v1/completions, or one refusing even the minimal request, is a
``UsageError`` before any run is stored.

The held-out text asks for OpenAI's legacy ``echo`` with ``logprobs`` (the response's
logprobs start with the prompt's tokens), else vLLM's ``prompt_logprobs``; a target that
gives neither has no perplexity, "not available from this target".
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from moeperf.suites.accuracy.prompts import Prompt
from moeperf.suites.accuracy.spec import AccuracySpec
from moeperf.suites.errors import SuiteError, UsageError
from moeperf.suites.serving.load.auth import RequestHeaders

_TOKEN_ID = re.compile(r"token_id:(\d+)")
# Fields the suite can run without, in the order they are given up when refused.
_OPTIONAL = ("return_tokens_as_token_ids", "ignore_eos", "logprobs")
_SNIPPET = 300


class TargetRequestError(SuiteError):
    """A request of the run failed (the run ends aborted, with what it said)."""


@dataclass(frozen=True, slots=True)
class Position:
    """One output position as the target reported it."""

    token_id: int
    logprob: float | None  # None: no logprobs from the target
    top: tuple[tuple[int, float], ...] | None  # its top-k (id, logprob); None: not given


@dataclass(frozen=True, slots=True)
class TargetOutput:
    """One prompt's completion; ``positions`` None when its token ids are not known."""

    prompt_id: str
    positions: tuple[Position, ...] | None
    finish_reason: str | None
    missing: str | None = None  # why ids, logprobs or top-k are absent

    @property
    def token_ids(self) -> tuple[int, ...] | None:
        return None if self.positions is None else tuple(p.token_id for p in self.positions)


@dataclass(frozen=True, slots=True)
class HeldoutLogprobs:
    """The held-out text's prompt logprobs (tokens 2..N) from the target, or why not."""

    logprobs: tuple[float, ...] | None
    source: str | None  # "echo" or "prompt_logprobs"
    missing: str | None = None


def _token_id(name: object) -> int | None:
    match = _TOKEN_ID.fullmatch(name) if isinstance(name, str) else None
    return int(match.group(1)) if match else None


def parse_choice(prompt_id: str, choice: dict[str, Any]) -> TargetOutput:
    """A completion choice as positions: ids from "token_id:ID" tokens (else vLLM's
    ``token_ids``), logprobs and top-k where given."""
    lps = choice.get("logprobs")
    finish = choice.get("finish_reason")
    tokens = lps.get("tokens") if isinstance(lps, dict) else None
    named = [_token_id(t) for t in tokens] if isinstance(tokens, list) else None
    ids = [t for t in named if t is not None] if named is not None else []
    if named is None or len(ids) != len(named):
        given = choice.get("token_ids")  # vLLM's return_token_ids
        if not (isinstance(given, list) and all(type(t) is int for t in given)):
            why = (
                "its logprobs name tokens by their text, not their id "
                "(return_tokens_as_token_ids not honoured)"
                if named is not None
                else "its completions carry neither logprobs nor token ids"
            )
            return TargetOutput(prompt_id, None, finish, why)
        ids = [int(t) for t in given]
    values = lps.get("token_logprobs") if isinstance(lps, dict) else None
    tops = lps.get("top_logprobs") if isinstance(lps, dict) else None
    missing = None
    if not (isinstance(values, list) and len(values) == len(ids)):
        values, tops, missing = [None] * len(ids), None, "its completions carry no logprobs"
    parsed_tops = _tops(tops, len(ids))
    if parsed_tops is None and missing is None:
        missing = "its top logprobs name tokens by their text, not their id"
    positions = tuple(
        Position(
            t,
            float(v) if isinstance(v, int | float) else None,
            parsed_tops[i] if parsed_tops is not None else None,
        )
        for i, (t, v) in enumerate(zip(ids, values, strict=True))
    )
    return TargetOutput(prompt_id, positions, finish, missing)


def _tops(tops: object, n: int) -> list[tuple[tuple[int, float], ...]] | None:
    if not (isinstance(tops, list) and len(tops) == n):
        return None
    out = []
    for entry in tops:
        if not isinstance(entry, dict):
            return None
        pairs = [(_token_id(k), v) for k, v in entry.items()]
        if any(t is None or not isinstance(v, int | float) for t, v in pairs):
            return None
        ranked = sorted(
            ((int(t), float(v)) for t, v in pairs if t is not None), key=lambda p: -p[1]
        )
        out.append(tuple(ranked))
    return out


@dataclass
class TargetClient:
    """Completions against one target, with the fields it accepts."""

    base_url: str
    model: str
    spec: AccuracySpec
    headers: RequestHeaders
    dropped: list[str] = field(default_factory=list)  # fields the target refused
    refusals: list[str] = field(default_factory=list)  # what it said of each

    def _url(self, path: str) -> str:
        return self.base_url.rstrip("/") + path

    def body(self, prompt_ids: Sequence[int]) -> dict[str, Any]:
        spec, target = self.spec.prompts, self.spec.target
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": list(prompt_ids),
            target.max_tokens_field: spec.output_tokens,
            "temperature": 0.0,
            "logprobs": spec.top_k,
            "return_tokens_as_token_ids": True,
            **target.extra_body,
        }
        if target.ignore_eos:
            body["ignore_eos"] = True
        for name in self.dropped:
            body.pop(name, None)
        return body

    async def _post(self, session: aiohttp.ClientSession, body: dict[str, Any]) -> tuple[int, str]:
        timeout = aiohttp.ClientTimeout(total=self.spec.prompts.request_timeout_s)
        try:
            async with session.post(
                self._url("/v1/completions"),
                json=body,
                headers=dict(self.headers.values),
                timeout=timeout,
            ) as response:
                return response.status, await response.text()
        except (aiohttp.ClientError, TimeoutError) as exc:
            problem = self.headers.redact(f"{type(exc).__name__}: {exc}")
            raise TargetRequestError(f"POST {self._url('/v1/completions')}: {problem}") from None

    def _said(self, text: str) -> str:
        return self.headers.redact(text.strip())[:_SNIPPET]

    async def negotiate(self, session: aiohttp.ClientSession, prompt: Prompt) -> TargetOutput:
        """The first prompt's completion, leaving out each field the target refuses; a
        ``UsageError`` (exit 2, no run stored) when it refuses the rest too."""
        while True:
            status, text = await self._post(session, self.body(prompt.token_ids))
            if status == 200:
                return self._output(prompt, text)
            url = self._url("/v1/completions")
            if status == 404:
                raise UsageError(
                    f"target {self.base_url} has no /v1/completions (POST {url}: HTTP 404): "
                    "the accuracy suite needs the completions API (token-id prompts, "
                    "logprobs); nothing was stored"
                )
            named = next(
                (f for f in _OPTIONAL if f not in self.dropped and f in text),
                None,
            )
            if status not in (400, 422) or named is None:
                raise UsageError(
                    f"target {self.base_url} refused a greedy completion (POST {url}: HTTP "
                    f"{status}): {self._said(text)}; nothing was stored"
                )
            self.dropped.append(named)
            self.refusals.append(f"{named}: HTTP {status}, {self._said(text)}")

    def _output(self, prompt: Prompt, text: str) -> TargetOutput:
        try:
            choice = json.loads(text)["choices"][0]
        except (ValueError, KeyError, IndexError, TypeError):
            raise TargetRequestError(
                f"target {self.base_url}: a completion that is not OpenAI's JSON: "
                f"{self._said(text)}"
            ) from None
        return parse_choice(prompt.prompt_id, choice)

    async def complete(self, session: aiohttp.ClientSession, prompt: Prompt) -> TargetOutput:
        status, text = await self._post(session, self.body(prompt.token_ids))
        if status != 200:
            raise TargetRequestError(
                f"target {self.base_url}: prompt {prompt.prompt_id!r} got HTTP {status}: "
                f"{self._said(text)}"
            )
        return self._output(prompt, text)

    async def one_at_a_time(
        self, session: aiohttp.ClientSession, prompts: Sequence[Prompt]
    ) -> list[TargetOutput]:
        return [await self.complete(session, p) for p in prompts]

    async def at_once(
        self, session: aiohttp.ClientSession, prompts: Sequence[Prompt], concurrency: int
    ) -> list[TargetOutput]:
        """Every prompt, at most ``concurrency`` in flight (all sent together when fewer)."""
        gate = asyncio.Semaphore(concurrency)

        async def one(prompt: Prompt) -> TargetOutput:
            async with gate:
                return await self.complete(session, prompt)

        return list(await asyncio.gather(*(one(p) for p in prompts)))

    async def heldout(self, session: aiohttp.ClientSession, ids: Sequence[int]) -> HeldoutLogprobs:
        """Prompt logprobs of tokens 2..N of ``ids``: echo first, then prompt_logprobs."""
        base: dict[str, Any] = {
            "model": self.model,
            "prompt": list(ids),
            self.spec.target.max_tokens_field: 1,
            "temperature": 0.0,
            **self.spec.target.extra_body,
        }
        echo = {**base, "echo": True, "logprobs": 1}
        if "return_tokens_as_token_ids" not in self.dropped:
            echo["return_tokens_as_token_ids"] = True
        status, text = await self._post(session, echo)
        found, why_echo = _echoed(status, text, ids) if status == 200 else (None, None)
        if found is not None:
            return HeldoutLogprobs(tuple(found), "echo")
        why_echo = why_echo or f"echo: HTTP {status}, {self._said(text)}"
        status, text = await self._post(session, {**base, "prompt_logprobs": 0})
        found, why_vllm = _prompt_logprobs(status, text, ids)
        if found is not None:
            return HeldoutLogprobs(tuple(found), "prompt_logprobs")
        why_vllm = why_vllm or f"prompt_logprobs: HTTP {status}, {self._said(text)}"
        return HeldoutLogprobs(None, None, f"{why_echo}; {why_vllm}")


def _choice(text: str) -> dict[str, Any] | None:
    try:
        choice = json.loads(text)["choices"][0]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    return choice if isinstance(choice, dict) else None


def _echoed(status: int, text: str, ids: Sequence[int]) -> tuple[list[float] | None, str | None]:
    choice = _choice(text)
    lps = choice.get("logprobs") if choice else None
    values = lps.get("token_logprobs") if isinstance(lps, dict) else None
    if not isinstance(values, list) or len(values) < len(ids):
        return None, "echo: the logprobs do not start with the prompt's tokens"
    tokens = lps.get("tokens") if isinstance(lps, dict) else None
    echoed_ids = [_token_id(t) for t in tokens[: len(ids)]] if isinstance(tokens, list) else []
    if None not in echoed_ids and echoed_ids and echoed_ids != list(ids):
        return None, "echo: the echoed tokens are not the prompt sent"
    found = values[1 : len(ids)]
    if not all(isinstance(v, int | float) for v in found):
        return None, "echo: the prompt's tokens have no logprobs"
    return [float(v) for v in found], None


def _prompt_logprobs(
    status: int, text: str, ids: Sequence[int]
) -> tuple[list[float] | None, str | None]:
    if status != 200:
        return None, None
    choice = _choice(text)
    entries = choice.get("prompt_logprobs") if choice else None
    if not isinstance(entries, list) or len(entries) != len(ids):
        return None, "prompt_logprobs: no list of one entry per prompt token in the choice"
    found = []
    for token, entry in zip(ids[1:], entries[1:], strict=True):
        item = entry.get(str(token)) if isinstance(entry, dict) else None
        value = item.get("logprob") if isinstance(item, dict) else None
        if not isinstance(value, int | float):
            return None, "prompt_logprobs: an entry lacks the prompt token's logprob"
        found.append(float(value))
    return found, None
