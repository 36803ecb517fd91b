"""The synthetic model's output in OpenAI's wire format: SSE chunks and whole responses.

Streaming is the measured path, so ``ChunkEncoder`` builds every constant byte string once
per request and each chunk only joins precomputed per-token fragments, plus the usage
numbers where the response's ``StreamShape`` (``targets.openai_wire``) puts them.
Generated token texts contain no JSON-escapable characters, which is what makes splicing
them in as raw bytes safe.
"""

from __future__ import annotations

import json
from typing import Any

from moeperf.targets.openai_wire import StreamShape, sse_event, usage_json
from moeperf.targets.synthetic.tokenizer import GENERATED_CYCLE, GENERATED_TOKENS

# The "malformed" fault: a body, or an SSE event, that is not JSON.
MALFORMED_JSON = b"{not json"
MALFORMED_EVENT = sse_event(MALFORMED_JSON)

# A fixed, made-up log-probability per generated word: plausible values, stable output.
_LOGPROBS = tuple(-round(0.001 * (1 + n % 97), 3) for n in range(GENERATED_CYCLE))


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


# Per-token fragments, precomputed for the whole cycle of generated words.
_TEXT = tuple(token.encode() for token in GENERATED_TOKENS)
_TOKEN_JSON = tuple(_dumps(token) for token in GENERATED_TOKENS)
_LOGPROB_JSON = tuple(_dumps(lp) for lp in _LOGPROBS)
_TOP_JSON = tuple(_dumps({t: lp}) for t, lp in zip(GENERATED_TOKENS, _LOGPROBS, strict=True))
_CHAT_LOGPROB_JSON = tuple(
    _dumps({"token": t, "logprob": lp, "bytes": list(t.encode()), "top_logprobs": []})
    for t, lp in zip(GENERATED_TOKENS, _LOGPROBS, strict=True)
)
# text_offset of token i within a completion: whole cycles, then the cycle's own prefix.
_CYCLE_OFFSETS = tuple(sum(len(t) for t in GENERATED_TOKENS[:n]) for n in range(GENERATED_CYCLE))
_CYCLE_CHARS = sum(len(t) for t in GENERATED_TOKENS)


def _text_offset(index: int) -> int:
    cycles, n = divmod(index, GENERATED_CYCLE)
    return cycles * _CYCLE_CHARS + _CYCLE_OFFSETS[n]


class ChunkEncoder:
    """The SSE events (``data: <json>\\n\\n``) of one streamed response, or its whole body.

    ``chat`` selects ``chat.completion.chunk`` (``choices[0].delta``) over
    ``text_completion`` (``choices[0].text``). ``shape`` says which chunks carry the
    cumulative usage (every one, the last one, none) and whether a whole body does.
    """

    def __init__(
        self,
        *,
        chat: bool,
        response_id: str,
        created: int,
        model: str,
        prompt_tokens: int,
        logprobs: bool,
        shape: StreamShape,
    ) -> None:
        obj = "chat.completion.chunk" if chat else "text_completion"
        head = (
            f'data: {{"id":{json.dumps(response_id)},"object":"{obj}","created":{created},'
            f'"model":{json.dumps(model)},"choices":['
        ).encode()
        self._chat = chat
        self._response_id = response_id
        self._created = created
        self._model = model
        self._prompt_tokens = prompt_tokens
        self._logprobs = logprobs
        # Decided once per response: the per-chunk path only reads two booleans.
        self._usage_every = shape.usage_every_chunk
        self._usage_last = shape.usage_on(finished=True)
        self._usage_in_body = shape.usage_in_body
        self._head = head
        if chat:
            self._open = head + b'{"index":0,"delta":{"content":"'
            self._mid = b'"},"logprobs":'
        else:
            self._open = head + b'{"index":0,"text":"'
            self._mid = b'","logprobs":'

    def _usage(self, completion_tokens: int) -> bytes:
        prompt = self._prompt_tokens
        return b',"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}' % (
            prompt,
            completion_tokens,
            prompt + completion_tokens,
        )

    def role(self) -> bytes:
        """Chat's first chunk: the assistant role and no tokens (vLLM sends it at once)."""
        usage = self._usage(0) if self._usage_every else b""
        return (
            self._head
            + b'{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,'
            + b'"finish_reason":null}]'
            + usage
            + b"}\n\n"
        )

    def tokens(self, start: int, count: int, last: bool) -> bytes:
        """The chunk carrying generated tokens ``start .. start + count - 1``."""
        if count == 1:
            text = _TEXT[start % GENERATED_CYCLE]
        else:
            text = b"".join(_TEXT[i % GENERATED_CYCLE] for i in range(start, start + count))
        parts = [self._open, text, self._mid]
        if self._logprobs:
            parts.append(self._logprobs_json(start, count))
        else:
            parts.append(b"null")
        parts.append(b',"finish_reason":"length"}]' if last else b',"finish_reason":null}]')
        if self._usage_last if last else self._usage_every:
            parts.append(self._usage(start + count))
        parts.append(b"}\n\n")
        return b"".join(parts)

    def usage(self, completion_tokens: int) -> bytes:
        """The final usage-only chunk (``choices: []``) of ``stream_options.include_usage``."""
        return self._head + b"]" + self._usage(completion_tokens) + b"}\n\n"

    def whole(self, completion_tokens: int) -> bytes:
        """The body of a non-streamed response holding all ``completion_tokens`` tokens."""
        chat = self._chat
        text = "".join(GENERATED_TOKENS[i % GENERATED_CYCLE] for i in range(completion_tokens))
        ids = [i % GENERATED_CYCLE for i in range(completion_tokens)]
        choice: dict[str, Any] = {"index": 0}
        if chat:
            choice["message"] = {"role": "assistant", "content": text}
            choice["logprobs"] = (
                {"content": [json.loads(_CHAT_LOGPROB_JSON[n]) for n in ids]}
                if self._logprobs
                else None
            )
        else:
            choice["text"] = text
            choice["logprobs"] = (
                {
                    "tokens": [GENERATED_TOKENS[n] for n in ids],
                    "token_logprobs": [_LOGPROBS[n] for n in ids],
                    "top_logprobs": [{GENERATED_TOKENS[n]: _LOGPROBS[n]} for n in ids],
                    "text_offset": [_text_offset(i) for i in range(completion_tokens)],
                }
                if self._logprobs
                else None
            )
        choice["finish_reason"] = "length"
        body: dict[str, Any] = {
            "id": self._response_id,
            "object": "chat.completion" if chat else "text_completion",
            "created": self._created,
            "model": self._model,
            "choices": [choice],
        }
        if self._usage_in_body:
            body["usage"] = usage_json(self._prompt_tokens, completion_tokens)
        return _dumps(body)

    def _logprobs_json(self, start: int, count: int) -> bytes:
        ids = [i % GENERATED_CYCLE for i in range(start, start + count)]
        if self._chat:
            return b'{"content":[' + b",".join(_CHAT_LOGPROB_JSON[n] for n in ids) + b"]}"
        offsets = b",".join(b"%d" % _text_offset(i) for i in range(start, start + count))
        return (
            b'{"tokens":['
            + b",".join(_TOKEN_JSON[n] for n in ids)
            + b'],"token_logprobs":['
            + b",".join(_LOGPROB_JSON[n] for n in ids)
            + b'],"top_logprobs":['
            + b",".join(_TOP_JSON[n] for n in ids)
            + b'],"text_offset":['
            + offsets
            + b"]}"
        )
