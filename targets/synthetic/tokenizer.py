"""The synthetic model's tokenizer: one token per whitespace-separated word.

Generated token ``i`` is the text `` w{i mod 1000}``, so any generated output splits back
into exactly as many words as tokens were generated, and a client that counts tokens this
way reproduces the server's usage numbers exactly.
"""

from __future__ import annotations

import zlib

VOCAB_SIZE = 50_000
# Generated texts cycle through this many distinct words (small enough to precompute).
GENERATED_CYCLE = 1000
GENERATED_TOKENS: tuple[str, ...] = tuple(f" w{n}" for n in range(GENERATED_CYCLE))


def count_tokens(text: str) -> int:
    """Number of tokens in ``text``: its whitespace-separated words."""
    return len(text.split())


def token_strs(text: str) -> list[str]:
    """The tokens of ``text`` as strings (its words, whitespace dropped)."""
    return text.split()


def encode(text: str) -> list[int]:
    """Stable token ids for ``text``: CRC-32 of each word mod ``VOCAB_SIZE``.

    crc32 rather than ``hash()``: string hashes are salted per process.
    """
    return [zlib.crc32(word.encode()) % VOCAB_SIZE for word in text.split()]


def generated_token(index: int) -> str:
    """Text of the ``index``-th generated token (0-based), with its leading space."""
    return GENERATED_TOKENS[index % GENERATED_CYCLE]


def generated_text(n_tokens: int, start: int = 0) -> str:
    """The text of generated tokens ``start .. start + n_tokens - 1``."""
    return "".join(generated_token(i) for i in range(start, start + n_tokens))
