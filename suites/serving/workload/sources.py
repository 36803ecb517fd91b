"""The requests a serving benchmark sends: synthetic prompts of exact token lengths, or a dataset.

Synthetic prompts follow vLLM's random dataset (random vocabulary tokens, exact length in the
target's tokenizer) with an optional shared prefix to exercise prefix caching. Datasets are JSONL
(`{"prompt": ..., "output_tokens"?: ...}` per line) or ShareGPT records, as JSONL or as the
original JSON array.
"""

from __future__ import annotations

import json
import logging
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from moeperf.suites.errors import UsageError
from moeperf.suites.serving.workload.tokenizer import TargetTokenizer

log = logging.getLogger(__name__)


class WorkloadError(UsageError):
    """A workload could not be built: a bad length distribution, dataset file or record."""


@dataclass(frozen=True)
class Prompt:
    """One request's input.

    `prompt_tokens` counts the text's content tokens as built (None when no tokenizer was
    available); the server's usage also counts the chat template and special tokens.
    """

    text: str
    prompt_tokens: int | None
    output_tokens: int  # max_tokens to request

    def messages(self) -> list[dict[str, str]]:
        """The chat-completions `messages` for this prompt."""
        return [{"role": "user", "content": self.text}]


LengthKind = Literal["fixed", "uniform", "normal", "lognormal"]
_KINDS = ("fixed", "uniform", "normal", "lognormal")


@dataclass(frozen=True)
class LengthDist:
    """A token-length distribution, sampled as integers clipped to [min, max] (max None: no cap).

    `spread` is the half-width for uniform, the standard deviation for normal, and the sigma of
    log(length) for lognormal (whose median is `mean`); fixed ignores it.
    """

    kind: LengthKind
    mean: float
    spread: float = 0.0
    min: int = 1
    max: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise WorkloadError(f"length kind {self.kind!r} is not one of {', '.join(_KINDS)}")
        if not self.mean > 0:
            raise WorkloadError(f"length mean must be > 0, got {self.mean}")
        if not self.spread >= 0:
            raise WorkloadError(f"length spread must be >= 0, got {self.spread}")
        if self.min < 1:
            raise WorkloadError(f"length min must be >= 1, got {self.min}")
        if self.max is not None and self.max < self.min:
            raise WorkloadError(f"length max {self.max} is below min {self.min}")

    @classmethod
    def fixed(cls, n_tokens: int) -> LengthDist:
        """Always `n_tokens`."""
        return cls("fixed", n_tokens)

    def sample(self, rng: random.Random) -> int:
        """One length in tokens."""
        if self.kind == "fixed":
            x = self.mean
        elif self.kind == "uniform":
            x = rng.randint(round(self.mean - self.spread), round(self.mean + self.spread))
        elif self.kind == "normal":
            x = rng.gauss(self.mean, self.spread)
        else:
            x = rng.lognormvariate(math.log(self.mean), self.spread)
        n = max(self.min, round(x))
        return n if self.max is None else min(self.max, n)


# Rebuilds of a suffix whose first tokens merged with the shared prefix's last ones.
_JOIN_TRIES = 10


async def random_prompts(
    tokenizer: TargetTokenizer,
    count: int,
    input_len: LengthDist,
    output_len: LengthDist,
    shared_prefix_tokens: int = 0,
    seed: int | str = 0,
) -> list[Prompt]:
    """`count` random-token prompts of exact length in the target's tokenizer.

    Every prompt starts with the same `shared_prefix_tokens`-token prefix, which counts toward
    the sampled input length; the random suffix has at least 1 token, so a prompt is longer than
    sampled when the sample is below the prefix. The result depends only on the seed and the
    tokenizer: each prompt draws from its own generator, so all are built in batches.
    """
    if count < 0 or shared_prefix_tokens < 0:
        raise WorkloadError(
            f"count and shared_prefix_tokens must be >= 0, got {count} and {shared_prefix_tokens}"
        )
    lengths_rng = random.Random(f"moeperf.random.lengths:{seed}")
    input_tokens = [input_len.sample(lengths_rng) for _ in range(count)]
    output_tokens = [output_len.sample(lengths_rng) for _ in range(count)]
    suffix_tokens = [max(1, n - shared_prefix_tokens) for n in input_tokens]
    rngs = [random.Random(f"moeperf.random.prompt:{seed}:{i}") for i in range(count)]
    if shared_prefix_tokens:
        prefix_rng = random.Random(f"moeperf.random.prefix:{seed}")
        prefix = await tokenizer.abuild_text(shared_prefix_tokens, prefix_rng)
        texts = await _prefixed_texts(tokenizer, prefix, shared_prefix_tokens, suffix_tokens, rngs)
    else:
        texts = await tokenizer.abuild_many(suffix_tokens, rngs)  # exact by construction
    return [
        Prompt(text, shared_prefix_tokens + n_suffix, n_out)
        for text, n_suffix, n_out in zip(texts, suffix_tokens, output_tokens, strict=True)
    ]


async def _prefixed_texts(
    tokenizer: TargetTokenizer,
    prefix: str,
    prefix_tokens: int,
    suffix_tokens: list[int],
    rngs: list[random.Random],
) -> list[str]:
    """prefix + a random suffix for each i, exactly prefix_tokens + suffix_tokens[i] long as a
    whole: where the joint merges tokens, that suffix is rebuilt longer or shorter."""
    targets = [prefix_tokens + n for n in suffix_tokens]
    prefixes = [prefix] * len(targets)
    suffixes = await exact_suffixes(tokenizer, prefixes, targets, suffix_tokens, rngs)
    return [prefix + suffix for suffix in suffixes]


class JoinError(WorkloadError):
    """No suffix made `prefixes[index]` + suffix exactly its target length in the tries;
    `suffixes` are the last ones tried (exact where the join succeeded)."""

    def __init__(self, message: str, index: int, suffixes: list[str]) -> None:
        super().__init__(message)
        self.index = index
        self.suffixes = suffixes


async def exact_suffixes(
    tokenizer: TargetTokenizer,
    prefixes: list[str],
    targets: list[int],
    suffix_tokens: list[int],
    rngs: list[random.Random],
    tries: int = _JOIN_TRIES,
) -> list[str]:
    """A random suffix for each i such that prefixes[i] + suffix encodes to exactly targets[i]
    tokens. The first try has suffix_tokens[i] tokens, drawn from rngs[i]; where the joint
    merges or splits tokens, that suffix is rebuilt longer or shorter (at least 1 token), all
    pending ones in one batch per try, up to `tries` times. Each try succeeds by chance where a
    suffix's first character decides the joint (a prefix ending in spaces), so a caller joining
    many texts gives more tries. Raises JoinError, naming the first failure's index."""
    want = list(suffix_tokens)
    suffixes = [""] * len(targets)
    pending = list(range(len(targets)))
    for _ in range(tries):
        built = await tokenizer.abuild_many([want[i] for i in pending], [rngs[i] for i in pending])
        for i, suffix in zip(pending, built, strict=True):
            suffixes[i] = suffix
        counts = await tokenizer.acount_many([prefixes[i] + suffixes[i] for i in pending])
        still_pending = []
        for i, got in zip(pending, counts, strict=True):
            if got != targets[i]:
                want[i] = max(1, want[i] + targets[i] - got)
                still_pending.append(i)
        pending = still_pending
        if not pending:
            return suffixes
    raise JoinError(
        f"could not join a prefix and a suffix into exactly {targets[pending[0]]} tokens "
        f"in {tries} tries ({len(pending)} prompts failed)",
        pending[0],
        suffixes,
    )


@dataclass(frozen=True)
class Dataset:
    """Prompts drawn from a dataset file, and how many of its records were unusable."""

    prompts: list[Prompt]
    usable_records: int
    skipped_records: int


@dataclass(frozen=True)
class _Record:
    prompt: str
    output_tokens: int | None  # given by the record
    reply: str | None  # ShareGPT's first reply, counted for the output length when needed


class _Unusable(Exception):
    """A record that cannot become a prompt; skipped and counted, not fatal."""


_HUMAN = ("human", "user")
_GPT = ("gpt", "assistant", "chatgpt")


async def load_dataset(
    path: str | Path,
    count: int,
    output_len: LengthDist | None,
    seed: int = 0,
    tokenizer: TargetTokenizer | None = None,
) -> Dataset:
    """`count` prompts from a JSONL or JSON-array dataset, in a seeded shuffled order that is
    reshuffled and cycled when `count` exceeds the usable records.

    Output length: `output_len` when given (it overrides the data, as vLLM's flags do), else the
    record's `output_tokens`, else the token count of a ShareGPT record's gpt reply when a
    tokenizer is given; records with none of these are skipped. With a tokenizer, prompt_tokens
    is filled. It is async because the tokenizer protocol is.
    """
    if count < 1:
        raise WorkloadError(f"dataset prompt count must be >= 1, got {count}")
    path = Path(path)
    records: list[_Record] = []
    skipped, first_skip = 0, ""
    for where, value in _read_values(path):
        try:
            record = _parse_record(value)
            needs_reply = output_len is None and record.output_tokens is None
            if needs_reply and (record.reply is None or tokenizer is None):
                raise _Unusable(
                    "no output length (give output_len, output_tokens, or a gpt reply and a "
                    "tokenizer)"
                )
            records.append(record)
        except _Unusable as exc:
            skipped += 1
            first_skip = first_skip or f"{where}: {exc}"
    if not records:
        raise WorkloadError(
            f"{path}: no usable records ({skipped} skipped, first {first_skip or 'none'}); each "
            'needs {"prompt": str} or {"conversations": [{"from": "human", "value": str}, ...]}'
        )
    if skipped:
        log.warning("%s: skipped %d unusable records (first %s)", path, skipped, first_skip)

    rng = random.Random(f"moeperf.dataset:{seed}")
    chosen: list[int] = []  # indices into records
    while len(chosen) < count:
        order = list(range(len(records)))
        rng.shuffle(order)
        chosen += order[: count - len(chosen)]

    prompt_tokens: dict[int, int] = {}
    reply_tokens: dict[int, int] = {}
    if tokenizer is not None:
        unique = sorted(set(chosen))
        reply_needed = [
            i for i in unique if output_len is None and records[i].output_tokens is None
        ]
        counts = await tokenizer.acount_many(
            [records[i].prompt for i in unique] + [records[i].reply or "" for i in reply_needed]
        )
        prompt_tokens = dict(zip(unique, counts[: len(unique)], strict=True))
        reply_tokens = dict(zip(reply_needed, counts[len(unique) :], strict=True))

    prompts = []
    for i in chosen:
        r = records[i]
        if output_len is not None:
            n_out = output_len.sample(rng)
        elif r.output_tokens is not None:
            n_out = r.output_tokens
        else:
            n_out = max(1, reply_tokens[i])
        prompts.append(Prompt(r.prompt, prompt_tokens.get(i), n_out))
    return Dataset(prompts, usable_records=len(records), skipped_records=skipped)


def _read_values(path: Path) -> list[tuple[str, object]]:
    """Every JSON value in the file with where it came from: one per JSONL line, or one per
    element of a top-level JSON array."""
    if not path.is_file():
        what = "is not a file" if path.exists() else "does not exist"
        raise WorkloadError(f"dataset {path} {what}")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise WorkloadError(f"dataset {path} could not be read as UTF-8 text: {exc}") from exc
    if text.lstrip().startswith("["):
        try:
            array = json.loads(text)
        except json.JSONDecodeError as exc:
            raise WorkloadError(
                f"{path}: invalid JSON on line {exc.lineno} column {exc.colno}: {exc.msg}"
            ) from exc
        return [(f"record {i}", v) for i, v in enumerate(array, start=1)]
    values = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            values.append((f"line {n}", json.loads(line)))
        except json.JSONDecodeError as exc:
            raise WorkloadError(
                f"{path}: invalid JSON on line {n} column {exc.colno}: {exc.msg}"
            ) from exc
    return values


def _parse_record(value: object) -> _Record:
    if not isinstance(value, dict):
        raise _Unusable("not a JSON object")
    if "prompt" in value:
        prompt = value["prompt"]
        if not isinstance(prompt, str) or not prompt.strip():
            raise _Unusable("'prompt' is not a non-empty string")
        n_out = value.get("output_tokens")
        if n_out is not None and (type(n_out) is not int or n_out < 1):
            raise _Unusable(f"'output_tokens' must be a positive integer, got {n_out!r}")
        return _Record(prompt, n_out, None)
    turns = value.get("conversations")
    if not isinstance(turns, list):
        raise _Unusable("no 'prompt' or 'conversations' field")
    for i, turn in enumerate(turns):
        prompt = _turn_text(turn, _HUMAN)
        if prompt is not None:
            reply = _turn_text(turns[i + 1], _GPT) if i + 1 < len(turns) else None
            return _Record(prompt, None, reply)
    raise _Unusable("no human turn with text in 'conversations'")


def _turn_text(turn: object, roles: tuple[str, ...]) -> str | None:
    """The turn's text if it is from one of `roles` and not blank."""
    if not isinstance(turn, dict) or turn.get("from") not in roles:
        return None
    text = turn.get("value")
    return text if isinstance(text, str) and text.strip() else None
