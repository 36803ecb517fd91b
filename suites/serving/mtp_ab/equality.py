"""Greedy output equality across MTP arms: the same prompts, greedy, to every arm; each
arm's output compared with MTP off's, token by token, naming the prompt, the arm and the
first differing position. Verification must make a speculating engine's greedy output
exactly the main model's: any difference is a bug in it (the suite fails).

Tokens come from the target's logprobs (completions: ``logprobs.tokens``; chat:
``logprobs.content[].token``); a target that gives none is compared as text, by
character. The prompts go ``streams`` at a time, so batching is part of the check.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from moeperf.collectors.mtp_ab_records import MtpAbEquality, MtpAbMismatch
from moeperf.suites.serving.load.auth import RequestHeaders
from moeperf.suites.serving.workload.sources import Prompt

_TIMEOUT_S = 120.0


@dataclass(frozen=True, slots=True)
class ArmOutput:
    tokens: tuple[str, ...] | None  # None: the target gave no logprobs
    text: str


def _body(api: str, model: str, prompt: Prompt, output_tokens: int) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": output_tokens,
        "temperature": 0.0,
        "ignore_eos": True,
    }
    if api == "chat":
        return {**body, "messages": prompt.messages(), "logprobs": True, "top_logprobs": 0}
    return {**body, "prompt": prompt.text, "logprobs": 0}


def _output(api: str, answer: dict[str, Any]) -> ArmOutput:
    choice = answer["choices"][0]
    logprobs = choice.get("logprobs") or {}
    if api == "chat":
        text = (choice.get("message") or {}).get("content") or ""
        content = logprobs.get("content")
        tokens = tuple(t["token"] for t in content) if content else None
    else:
        text = choice.get("text") or ""
        listed = logprobs.get("tokens")
        tokens = tuple(listed) if listed else None
    return ArmOutput(tokens, text)


async def arm_outputs(
    base_url: str,
    api: str,
    model: str,
    prompts: Sequence[Prompt],
    output_tokens: int,
    streams: int,
    headers: RequestHeaders,
) -> list[ArmOutput]:
    """Every prompt's greedy output from one arm, ``streams`` requests in flight."""
    url = base_url.rstrip("/") + ("/v1/chat/completions" if api == "chat" else "/v1/completions")
    limit = asyncio.Semaphore(streams)
    timeout = aiohttp.ClientTimeout(total=_TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout, headers=dict(headers.values)) as session:

        async def one(prompt: Prompt) -> ArmOutput:
            async with limit:
                body = _body(api, model, prompt, output_tokens)
                async with session.post(url, json=body) as response:
                    response.raise_for_status()
                    return _output(api, await response.json())

        return list(await asyncio.gather(*(one(p) for p in prompts)))


def compare(outputs: dict[int, list[ArmOutput]], streams: int, output_tokens: int) -> MtpAbEquality:
    """Each arm's outputs (by draft count) against MTP off's (draft count 0)."""
    off = outputs[0]
    by_token = all(o.tokens is not None for arm in outputs.values() for o in arm)
    mismatches = []
    for drafts, arm in outputs.items():
        if drafts == 0:
            continue
        for index, (a, b) in enumerate(zip(off, arm, strict=True)):
            left: Sequence[str] = a.tokens if by_token and a.tokens is not None else a.text
            right: Sequence[str] = b.tokens if by_token and b.tokens is not None else b.text
            if list(left) == list(right):
                continue
            position = next(
                (i for i, (x, y) in enumerate(zip(left, right, strict=False)) if x != y),
                min(len(left), len(right)),
            )
            mismatches.append(
                MtpAbMismatch(
                    index,
                    drafts,
                    position,
                    left[position] if position < len(left) else None,
                    right[position] if position < len(right) else None,
                )
            )
    return MtpAbEquality(
        prompts=len(off),
        streams=streams,
        output_tokens=output_tokens,
        arms=tuple(d for d in outputs if d != 0),
        mismatches=tuple(mismatches),
        position_unit="token" if by_token else "character",
    )
