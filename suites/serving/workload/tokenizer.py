"""Token counts in the target's own tokenizer: local Hugging Face files or the server's /tokenize.

The harness needs the *target's* tokenizer to build prompts of an exact token length and to count
the tokens in streamed chunks when the server reports no usage. Two sources exist: the model's
`tokenizer.json` on local disk (CPU-bound, about a millisecond per 1,000 tokens) and the target's
vLLM-style `/tokenize` endpoint (a network round trip per call). The protocol is async-only so the
harness has one code path for both; the local implementation also offers plain sync methods for
callers outside a loop.

All counts are content tokens: special tokens the server adds (BOS, the chat template) are not
included, so a prompt's count here is below the server's reported `usage.prompt_tokens`.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import os
import random
from pathlib import Path
from typing import Protocol

import aiohttp
from tokenizers import Tokenizer

from moeperf.suites.errors import SuiteError
from moeperf.suites.serving.load.auth import NO_HEADERS, RequestHeaders


class TokenizerError(SuiteError):
    """The tokenizer could not be loaded or reached, or could not produce what was asked
    (the workload builder reports it as a usage error, exit 2)."""


class TargetTokenizer(Protocol):
    """Token counting and exact-length text in the target's tokenizer.

    The `_many` variants exist for speed: a local tokenizer encodes a batch in parallel in Rust,
    a remote one overlaps the round trips. Their results equal the one-at-a-time calls'.
    """

    async def acount(self, text: str) -> int:
        """Number of content tokens in `text`."""
        ...

    async def acount_many(self, texts: list[str]) -> list[int]:
        """`acount` of each text."""
        ...

    async def achunk_token_counts(self, chunks: list[str]) -> list[int]:
        """Tokens attributable to each streamed text chunk of one response, in order."""
        ...

    async def abuild_text(self, n_tokens: int, rng: random.Random) -> str:
        """A text that encodes to exactly `n_tokens` tokens; raises TokenizerError if it can't."""
        ...

    async def abuild_many(self, n_tokens: list[int], rngs: list[random.Random]) -> list[str]:
        """`abuild_text(n_tokens[i], rngs[i])` for each i; each text draws only from its rng."""
        ...

    async def aclose(self) -> None:
        """Release connections; a no-op for local tokenizers."""
        ...


# Rounds of decode -> re-encode -> trim/pad; vLLM uses 10, a few more cost nothing locally.
_HF_BUILD_TRIES = 20
# A character is at most 4 UTF-8 bytes, so at most 4 byte-level tokens.
_MAX_TOKENS_PER_CHAR = 4


class HFTokenizer:
    """A local Hugging Face `tokenizers` tokenizer; never touches the network.

    The sync methods do the work; the async protocol methods call them inline, since the work
    takes microseconds to milliseconds and the Rust encoder holds the GIL anyway.
    """

    def __init__(self, tokenizer: Tokenizer, source: str = "<in memory>") -> None:
        self._tok = tokenizer
        self.source = source
        self._pool: list[int] | None = None
        # Offsets are not needed for counts and cost ~40% of encode time; older versions of
        # tokenizers (< 0.20) lack the fast variant.
        self._encode_batch = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)

    @classmethod
    def from_dir(cls, path: str | os.PathLike[str]) -> HFTokenizer:
        """Load `tokenizer.json` from a Hugging Face tokenizer directory (or that file itself)."""
        p = Path(path)
        if not p.exists():
            raise TokenizerError(
                f"tokenizer path {p} does not exist; give a local Hugging Face tokenizer directory "
                "containing tokenizer.json, or 'server' to use the target's /tokenize endpoint"
            )
        file = p / "tokenizer.json" if p.is_dir() else p
        if not file.is_file():
            raise TokenizerError(
                f"no tokenizer.json in {p}; download the model's tokenizer files there "
                "(only tokenizer.json is read), or use 'server'"
            )
        try:
            tok = Tokenizer.from_file(str(file))
        except Exception as exc:  # the Rust side raises a bare Exception on malformed files
            raise TokenizerError(f"{file} is not a valid tokenizers JSON file: {exc}") from exc
        return cls(tok, source=str(file))

    def count(self, text: str) -> int:
        """Number of content tokens in `text`."""
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def count_many(self, texts: list[str]) -> list[int]:
        """`count` of each text, encoded as one parallel batch."""
        return [len(e.ids) for e in self._encode_batch(texts, add_special_tokens=False)]

    def chunk_token_counts(self, chunks: list[str]) -> list[int]:
        """Tokens per chunk: the whole text is encoded once and each token belongs to the chunk
        holding its last character, so a token merged across a boundary is counted once and the
        counts sum to `count("".join(chunks))`."""
        if not chunks:
            return []
        chunk_ends = list(itertools.accumulate(len(c) for c in chunks))
        counts = [0] * len(chunks)
        last = len(chunks) - 1
        encoding = self._tok.encode("".join(chunks), add_special_tokens=False)
        for _start, end in encoding.offsets:
            # end is exclusive; offset trimming can leave an empty span, then end-1 is still the
            # character the token stood for. bisect_right skips empty chunks.
            chunk = bisect.bisect_right(chunk_ends, max(end - 1, 0))
            counts[min(chunk, last)] += 1
        return counts

    def build_text(self, n_tokens: int, rng: random.Random) -> str:
        """A text of exactly `n_tokens` tokens; see `build_many`."""
        return self.build_many([n_tokens], [rng])[0]

    def build_many(self, n_tokens: list[int], rngs: list[random.Random]) -> list[str]:
        """Random vocabulary tokens decoded to text, re-encoded, then trimmed or padded until each
        text encodes to exactly its `n_tokens` (vLLM's random dataset method), all texts in
        lockstep so each round is one parallel batch."""
        if len(n_tokens) != len(rngs):
            raise TokenizerError(f"{len(n_tokens)} lengths but {len(rngs)} generators")
        for n in n_tokens:
            _check_positive(n)
        pool = self._sampling_pool()
        ids = [rng.choices(pool, k=n) for n, rng in zip(n_tokens, rngs, strict=True)]
        texts = [""] * len(n_tokens)
        pending = list(range(len(n_tokens)))
        for _ in range(_HF_BUILD_TRIES):
            decoded = self._tok.decode_batch([ids[i] for i in pending])
            encoded = self._encode_batch(decoded, add_special_tokens=False)
            still_pending = []
            for i, text, encoding in zip(pending, decoded, encoded, strict=True):
                if len(encoding.ids) == n_tokens[i]:
                    texts[i] = text
                else:
                    ids[i] = self._trim_or_pad(encoding.ids, n_tokens[i], rngs[i])
                    still_pending.append(i)
            pending = still_pending
            if not pending:
                return texts
        i = pending[0]
        raise TokenizerError(
            f"could not build a text of exactly {n_tokens[i]} tokens with {self.source} after "
            f"{_HF_BUILD_TRIES} rounds ({len(pending)} of {len(n_tokens)} texts failed)"
        )

    def _trim_or_pad(self, ids: list[int], n_tokens: int, rng: random.Random) -> list[int]:
        if len(ids) > n_tokens:
            ids = ids[:n_tokens]
            # Don't end inside a multi-byte character: it decodes to U+FFFD, which re-encodes
            # to more tokens, and trimming again would loop.
            while ids and self._tok.decode(ids[-_MAX_TOKENS_PER_CHAR:]).endswith("\ufffd"):
                ids.pop()
        return ids + rng.choices(self._sampling_pool(), k=n_tokens - len(ids))

    def _sampling_pool(self) -> list[int]:
        # Tokens that decode on their own to non-empty printable text: no special tokens, no
        # lone bytes of a multi-byte character, no control characters a server might reject.
        if self._pool is None:
            special = {i for i, t in self._tok.get_added_tokens_decoder().items() if t.special}
            ids = sorted(set(self._tok.get_vocab(with_added_tokens=True).values()) - special)
            texts = self._tok.decode_batch([[i] for i in ids])
            self._pool = [i for i, t in zip(ids, texts, strict=True) if _printable(t)]
            if not self._pool:
                raise TokenizerError(f"{self.source} has no printable non-special tokens")
        return self._pool

    async def acount(self, text: str) -> int:
        return self.count(text)

    async def acount_many(self, texts: list[str]) -> list[int]:
        return self.count_many(texts)

    async def achunk_token_counts(self, chunks: list[str]) -> list[int]:
        return self.chunk_token_counts(chunks)

    async def abuild_text(self, n_tokens: int, rng: random.Random) -> str:
        return self.build_text(n_tokens, rng)

    async def abuild_many(self, n_tokens: list[int], rngs: list[random.Random]) -> list[str]:
        return self.build_many(n_tokens, rngs)

    async def aclose(self) -> None:
        return None


def _printable(text: str) -> bool:
    return bool(text) and "\ufffd" not in text and all(c.isprintable() or c in "\n\t" for c in text)


def _check_positive(n_tokens: int) -> None:
    if n_tokens < 1:
        raise TokenizerError(f"a text must have at least 1 token, {n_tokens} was asked")


# Common English words for /tokenize-built texts: each is one or two tokens in typical
# vocabularies, so word counts converge on token counts in a few round trips.
_WORDS = (  # noqa: SIM905 - one string reads better than 150 quoted items
    "the of and to in is was for that with as on by at from his her they this which be or are "
    "an had not but have one all were their there been has more when who will would can time "
    "people year way day man thing woman life child world school state family student group "
    "country problem hand part place case week company system program question work government "
    "number night point home water room mother area money story fact month lot right study book "
    "eye job word business issue side kind head house service friend father power hour game "
    "line end member law car city community name team minute idea body information back parent "
    "face others level office door health person art war history party result change morning "
    "reason research girl guy moment air teacher force education"
).split()
# Rounds of tokenize -> add/remove words or characters; each round is one request.
_SERVER_BUILD_TRIES = 64


class ServerTokenizer:
    """The target's own tokenizer through its vLLM-style `POST {base_url}/tokenize` endpoint.

    `base_url` is the server root (vLLM serves /tokenize beside /v1, not under it). Chunk counts
    tokenize each chunk separately, so a token the model merges across a chunk boundary is
    counted in both chunks: totals can exceed the count of the whole text. Use a local
    HFTokenizer where exact per-chunk counts matter. An instance belongs to the event loop it is
    first used in (its session and semaphore bind to it). Every POST carries `headers` (the run's
    API key and spec headers), whose secrets are masked in every error it raises.
    """

    def __init__(
        self,
        base_url: str,
        session: aiohttp.ClientSession | None = None,
        *,
        timeout_s: float = 30.0,
        max_in_flight: int = 16,
        headers: RequestHeaders = NO_HEADERS,
    ) -> None:
        self.url = base_url.rstrip("/") + "/tokenize"
        self._headers = headers
        self._session = session
        self._owns_session = session is None
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        # Bounds this tokenizer's own load on the target however many callers gather at once.
        self._in_flight = asyncio.Semaphore(max_in_flight)

    async def acount(self, text: str) -> int:
        if not text:
            return 0
        body = await self._post({"prompt": text, "add_special_tokens": False})
        count = body.get("count")
        if isinstance(count, int):
            return count
        tokens = body.get("tokens")
        if isinstance(tokens, list):
            return len(tokens)
        shown = self._headers.redact(str(body))[:200]
        raise TokenizerError(f"{self.url} answered without 'count' or 'tokens': {shown}")

    async def acount_many(self, texts: list[str]) -> list[int]:
        return list(await asyncio.gather(*(self.acount(t) for t in texts)))

    async def achunk_token_counts(self, chunks: list[str]) -> list[int]:
        return await self.acount_many(chunks)

    async def abuild_text(self, n_tokens: int, rng: random.Random) -> str:
        """Random common words, tokenized and adjusted (whole words while far off, then single
        words or characters) until the server counts exactly `n_tokens`."""
        _check_positive(n_tokens)
        words = rng.choices(_WORDS, k=n_tokens)
        count = -1
        for _ in range(_SERVER_BUILD_TRIES):
            text = " ".join(words)
            count = await self.acount(text)
            if count == n_tokens:
                return text
            tokens_per_word = count / len(words) if count > 0 else 1.0
            n_words = int(abs(n_tokens - count) / tokens_per_word)  # rounds down: no overshoot
            if count < n_tokens:
                words += rng.choices(_WORDS, k=n_words) if n_words else ["a"]
            elif n_words and len(words) > n_words:
                del words[-n_words:]
            elif len(words[-1]) > 1:
                words[-1] = words[-1][:-1]
            elif len(words) > 1:
                words.pop()
            else:
                break  # one character is still too many tokens
        raise TokenizerError(
            f"could not build a text of exactly {n_tokens} tokens via {self.url} "
            f"(last try: {count} tokens); the server may add tokens the request cannot remove"
        )

    async def abuild_many(self, n_tokens: list[int], rngs: list[random.Random]) -> list[str]:
        if len(n_tokens) != len(rngs):
            raise TokenizerError(f"{len(n_tokens)} lengths but {len(rngs)} generators")
        builds = (self.abuild_text(n, rng) for n, rng in zip(n_tokens, rngs, strict=True))
        return list(await asyncio.gather(*builds))

    async def aclose(self) -> None:
        if self._owns_session and self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> ServerTokenizer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def _post(self, payload: dict[str, object]) -> dict[str, object]:
        if self._session is None:  # created lazily: a session must belong to the running loop
            self._session = aiohttp.ClientSession()
        try:
            async with (
                self._in_flight,
                self._session.post(
                    self.url, json=payload, timeout=self._timeout, headers=self._headers.values
                ) as resp,
            ):
                if resp.status != 200:
                    detail = self._headers.redact(await resp.text())[:200]
                    raise TokenizerError(
                        f"POST {self.url} returned HTTP {resp.status}: {detail}; the target must "
                        "serve vLLM's /tokenize endpoint, or give a local tokenizer directory"
                    )
                body = await resp.json(content_type=None)
        except aiohttp.ClientConnectorError as exc:
            raise TokenizerError(
                f"cannot reach {self.url} ({exc.os_error.strerror or exc.os_error}); is the "
                "target running? Or give workload.tokenizer a local tokenizer directory"
            ) from exc
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise TokenizerError(
                f"POST {self.url} failed: {self._headers.redact(repr(exc))}"
            ) from exc
        if not isinstance(body, dict):
            shown = self._headers.redact(str(body))[:200]
            raise TokenizerError(f"{self.url} answered with a non-object: {shown}")
        return body


def resolve_tokenizer(
    spec_value: str | None,
    base_url: str | None,
    session: aiohttp.ClientSession | None = None,
    headers: RequestHeaders = NO_HEADERS,
) -> TargetTokenizer | None:
    """The tokenizer a spec asks for: none (None or ""), "server" (the target's /tokenize at
    `base_url`, sent `headers`), or any other value as a local Hugging Face tokenizer directory."""
    if not spec_value:
        return None
    if spec_value == "server":
        if not base_url:
            raise TokenizerError(
                "tokenizer 'server' needs the target's base URL; give one, or a local "
                "tokenizer directory instead"
            )
        return ServerTokenizer(base_url, session, headers=headers)
    return HFTokenizer.from_dir(spec_value)
