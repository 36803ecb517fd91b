"""From engine outputs to OpenAI's wire format: text, stop strings, logprobs, chunks.

``TextAssembler`` turns token ids into text one token at a time, with vLLM's incremental
detokenization (decode a small window, emit what it adds, wait while it ends in a partial
UTF-8 character), and cuts the text at the first stop string. ``ResponseWriter`` builds
one request's SSE chunks and its whole (non-streamed) body in vLLM's shapes: legacy
``logprobs`` objects for completions, ``logprobs.content`` for chat, and ``usage`` with
``prompt_tokens_details.cached_tokens``.

Completions with ``echo`` put the prompt's text first in the first chunk (or the body),
and with ``logprobs`` its tokens first in the logprobs: the first prompt token's logprob
and top logprobs are null, as OpenAI's legacy API and vLLM give them. vLLM's
``prompt_logprobs`` list (whole bodies only) holds None for the first prompt token, then
per token ``{token id: {logprob, rank, decoded_token}}`` for the token and the top n.
With ``tokens_as_ids`` every token in logprobs is named "token_id:ID" (vLLM's
``return_tokens_as_token_ids``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from moeperf.targets.openai_wire import sse_event, usage_json
from moeperf.targets.serving.engine.api import TokenLogprob
from moeperf.targets.serving.openai_request import Tokenizer

_REPLACEMENT = "\ufffd"  # what a token ending inside a UTF-8 character decodes to


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def sse(payload: dict[str, Any]) -> bytes:
    """One server-sent event: ``data: <json>`` and a blank line."""
    return sse_event(_dumps(payload))


class TextAssembler:
    """Generated token ids -> text, incrementally, stopping at the first stop string.

    Special tokens (end of turn, end of document) decode to nothing, as vLLM's default
    ``skip_special_tokens`` does.
    """

    def __init__(self, tokenizer: Tokenizer, stop: Sequence[str] = ()) -> None:
        self._decode = tokenizer.decode
        self._ids: list[int] = []
        self._prefix_offset = 0  # window start: context for the next token's text
        self._read_offset = 0  # tokens whose text is already in self.text
        self._stop = tuple(stop)
        # Text that could be the start of a stop string is held back while streaming.
        self._hold = max((len(s) for s in self._stop), default=1) - 1
        self.text = ""  # all text so far (cut at the stop string once one matched)
        self.emitted = 0  # characters of self.text handed out by take()
        self.stop_reason: str | None = None  # the stop string that matched

    def add(self, token_id: int) -> bool:
        """Append a token's text; True when a stop string matched (the text is cut there)."""
        ids = self._ids
        ids.append(token_id)
        window = ids[self._prefix_offset :]
        before = self._decode(ids[self._prefix_offset : self._read_offset], True)
        after = self._decode(window, True)
        if len(after) <= len(before) or after.endswith(_REPLACEMENT):
            return False  # nothing new yet, or a character split across tokens
        start = max(0, len(self.text) - self._hold)
        self.text += after[len(before) :]
        self._prefix_offset, self._read_offset = self._read_offset, len(ids)
        return self._check_stop(start)

    def _check_stop(self, start: int) -> bool:
        found = [(i, s) for s in self._stop if (i := self.text.find(s, start)) >= 0]
        if not found:
            return False
        index, self.stop_reason = min(found)
        self.text = self.text[:index]
        return True

    def take(self, final: bool) -> str:
        """Text not handed out yet; unless ``final``, minus what may begin a stop string."""
        end = len(self.text) if final or not self._stop else len(self.text) - self._hold
        if end <= self.emitted:
            return ""
        piece = self.text[self.emitted : end]
        self.emitted = end
        return piece


@dataclass
class Delta:
    """What one engine output adds to a response (after stop strings are applied)."""

    text: str
    logprobs: list[TokenLogprob] | None
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    stop_reason: str | None = None  # the stop string that ended the request (vLLM's field)
    # The engine's prompt logprobs (None for the first token), on the first delta when asked.
    prompt_logprobs: Sequence[TokenLogprob | None] | None = None


def usage(delta: Delta) -> dict[str, Any]:
    """OpenAI's usage object, cached prompt tokens included."""
    return {
        **usage_json(delta.prompt_tokens, delta.completion_tokens),
        "prompt_tokens_details": {"cached_tokens": delta.cached_tokens},
    }


@dataclass
class ResponseWriter:
    """One response's chunks and body. ``chat`` picks chat.completion(.chunk) over
    text_completion; ``logprobs`` says whether the request asked for them."""

    tokenizer: Tokenizer
    chat: bool
    response_id: str
    created: int
    model: str
    logprobs: bool
    # Completions' echo: the prompt's text (None: no echo), its ids, and the top n of each
    # prompt token's logprobs; vLLM's prompt_logprobs list and its top n (None: not asked).
    echo_text: str | None = None
    prompt_ids: Sequence[int] = ()
    echo_top: int = 0
    prompt_top: int | None = None
    tokens_as_ids: bool = False  # tokens named "token_id:ID" in logprobs
    _text_offset: int = field(default=0, init=False)  # completions' legacy text_offset
    _echoed: bool = field(default=False, init=False)

    def _head(self) -> dict[str, Any]:
        kind = "chat.completion.chunk" if self.chat else "text_completion"
        return {
            "id": self.response_id,
            "object": kind,
            "created": self.created,
            "model": self.model,
        }

    def role_chunk(self, with_usage: Delta | None) -> bytes:
        """Chat's first chunk: the assistant role, no tokens (vLLM sends it at once)."""
        choice = {"index": 0, "delta": {"role": "assistant", "content": ""}}
        payload = {**self._head(), "choices": [{**choice, "logprobs": None, "finish_reason": None}]}
        if with_usage is not None:
            payload["usage"] = usage(with_usage)
        return sse(payload)

    def chunk(self, delta: Delta, with_usage: bool) -> bytes:
        """The chunk of one engine output: all its tokens, never split."""
        choice: dict[str, Any] = {"index": 0}
        echo_text, echoed = self._echo(delta.prompt_logprobs)
        if self.chat:
            choice["delta"] = {"content": delta.text}
        else:
            choice["text"] = echo_text + delta.text
        choice["logprobs"] = self._logprobs(delta.logprobs, echoed)
        choice["finish_reason"] = delta.finish_reason
        choice["stop_reason"] = delta.stop_reason
        payload = {**self._head(), "choices": [choice]}
        if with_usage:
            payload["usage"] = usage(delta)
        return sse(payload)

    def usage_chunk(self, last: Delta) -> bytes:
        """``stream_options.include_usage``'s final chunk: no choices, the usage."""
        return sse({**self._head(), "choices": [], "usage": usage(last)})

    def body(self, deltas: Sequence[Delta], with_usage: bool = True) -> bytes:
        """A non-streamed response holding every delta (and its usage, ``with_usage``)."""
        last = deltas[-1]
        text = "".join(d.text for d in deltas)
        lps = [lp for d in deltas for lp in d.logprobs or ()] if self.logprobs else None
        prompt_lps = next((d.prompt_logprobs for d in deltas if d.prompt_logprobs), None)
        echo_text, echoed = self._echo(prompt_lps)
        choice: dict[str, Any] = {"index": 0}
        if self.chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = echo_text + text
        choice["logprobs"] = self._logprobs(lps, echoed)
        choice["finish_reason"] = last.finish_reason
        choice["stop_reason"] = last.stop_reason
        if self.prompt_top is not None:
            choice["prompt_logprobs"] = self._prompt_logprobs(prompt_lps)
        kind = "chat.completion" if self.chat else "text_completion"
        payload = {**self._head(), "object": kind, "choices": [choice]}
        if with_usage:
            payload["usage"] = usage(last)
        return _dumps(payload)

    def _echo(
        self, prompt_lps: Sequence[TokenLogprob | None] | None
    ) -> tuple[str, list[tuple[int, TokenLogprob | None]]]:
        """What echo puts first, once: the prompt's text, and (with logprobs) its tokens
        with their logprobs, top n cut to echo's (none if the engine gave none)."""
        if self.echo_text is None or self._echoed:
            return "", []
        self._echoed = True
        if not self.logprobs or prompt_lps is None:
            return self.echo_text, []
        cut = [
            None if lp is None else replace(lp, top=lp.top[: self.echo_top]) for lp in prompt_lps
        ]
        return self.echo_text, list(zip(self.prompt_ids, cut, strict=True))

    def _token(self, token_id: int) -> str:
        return f"token_id:{token_id}" if self.tokens_as_ids else self.tokenizer.decode([token_id])

    def _logprobs(
        self,
        lps: list[TokenLogprob] | None,
        echoed: Sequence[tuple[int, TokenLogprob | None]] = (),
    ) -> dict[str, Any] | None:
        if not self.logprobs or lps is None:
            return None
        if self.chat:
            return {"content": [self._chat_entry(lp) for lp in lps]}
        entries = [*echoed, *((lp.token_id, lp) for lp in lps)]
        tokens = [self._token(token_id) for token_id, _ in entries]
        offsets = []
        for token_id, _ in entries:
            offsets.append(self._text_offset)
            self._text_offset += len(self.tokenizer.decode([token_id]))
        return {
            "tokens": tokens,
            "token_logprobs": [None if lp is None else lp.logprob for _, lp in entries],
            # The chosen token too, as OpenAI's legacy API and vLLM give it.
            "top_logprobs": [
                None
                if lp is None
                else {self._token(t): v for t, v in ((lp.token_id, lp.logprob), *lp.top)}
                for _, lp in entries
            ],
            "text_offset": offsets,
        }

    def _prompt_logprobs(
        self, prompt_lps: Sequence[TokenLogprob | None] | None
    ) -> list[dict[str, Any] | None] | None:
        """vLLM's prompt_logprobs: per prompt token (None for the first) the token and the
        top n, each ``{logprob, rank, decoded_token}`` under its id."""
        if prompt_lps is None:
            return None
        n = self.prompt_top or 0
        out: list[dict[str, Any] | None] = []
        for lp in prompt_lps:
            if lp is None:
                out.append(None)
                continue
            ranked = [(lp.token_id, lp.logprob, lp.rank)]
            ranked += [(t, v, rank) for rank, (t, v) in enumerate(lp.top[:n], start=1)]
            entry: dict[str, Any] = {}
            for token_id, logprob, rank in ranked:
                # The prompt token keeps its own rank where it is also among the top n.
                entry.setdefault(
                    str(token_id),
                    {"logprob": logprob, "rank": rank, "decoded_token": self._token(token_id)},
                )
            out.append(entry)
        return out

    def _chat_entry(self, lp: TokenLogprob) -> dict[str, Any]:
        token = self._token(lp.token_id)
        return {
            "token": token,
            "logprob": lp.logprob,
            "bytes": list(token.encode()),
            "top_logprobs": [
                {"token": (s := self._token(t)), "logprob": v, "bytes": list(s.encode())}
                for t, v in lp.top
            ],
        }
