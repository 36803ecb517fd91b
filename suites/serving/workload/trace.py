"""Request traces for replay, and prompts that reproduce a trace's prefix sharing.

Two formats, both JSONL with one request per line:

- Mooncake's published traces (github.com/kvcache-ai/Mooncake, FAST25-release/traces):
  `{"timestamp": <ms>, "input_length": int, "output_length": int, "hash_ids": [int, ...]}`.
  The timestamp is in milliseconds. The prompt is cut into blocks (512 tokens in that release)
  and each block has a hash id; equal ids mean the same block of tokens, and since the ids hash
  the whole prefix up to their block, two requests with the same first k ids share k blocks.
- The plain format: `{"timestamp": <s>, "input_tokens": int, "output_tokens": int}`, the
  timestamp in seconds, with optional `hash_ids` of the same meaning.

The prompts are random tokens of exact length in the target's tokenizer (as
`sources.random_prompts`), built so that equal hash ids become equal text: see `trace_prompts`.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from moeperf.suites.serving.workload.sources import JoinError, Prompt, WorkloadError, exact_suffixes
from moeperf.suites.serving.workload.tokenizer import TargetTokenizer

TraceFormat = Literal["mooncake", "jsonl"]


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request of a trace: when it is sent, its lengths, and its prompt's blocks."""

    timestamp_s: float  # since the trace's first request
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()  # one per block of prompt tokens; equal ids, equal blocks
    line: int = field(default=0, compare=False)  # the file line it came from; 0: not from one


@dataclass(frozen=True, slots=True)
class Trace:
    """A trace's requests, sorted by time (stable), the first at 0.0 s."""

    path: str
    format: TraceFormat
    requests: tuple[TraceRequest, ...]

    @property
    def span_s(self) -> float:
        """Seconds from the first request to the last."""
        return self.requests[-1].timestamp_s if self.requests else 0.0

    @property
    def count(self) -> int:
        return len(self.requests)


@dataclass(frozen=True, slots=True)
class _Schema:
    input_key: str
    output_key: str
    units_per_second: float  # of the timestamp
    hash_ids_required: bool


_SCHEMAS: dict[TraceFormat, _Schema] = {
    "mooncake": _Schema("input_length", "output_length", 1000.0, hash_ids_required=True),
    "jsonl": _Schema("input_tokens", "output_tokens", 1.0, hash_ids_required=False),
}
_FORMATS = ("auto", "mooncake", "jsonl")


def read_trace(
    path: str | Path,
    format: Literal["auto", "mooncake", "jsonl"] = "auto",
    max_requests: int | None = None,
) -> Trace:
    """The trace in a local file (never the network), sorted by timestamp and shifted so its
    first request is at 0.0 s.

    Unsorted or negative timestamps are allowed: the requests are sorted by time (stably, so
    equal times keep the file's order) and then shifted. `max_requests` keeps the earliest ones.
    "auto" picks the format by the first record's keys (input_length: mooncake, input_tokens:
    jsonl). Blank lines are skipped; unknown keys are ignored. A bad file, line or field, or no
    requests at all, raises WorkloadError (exit 2) naming the file and line.
    """
    if format not in _FORMATS:
        raise WorkloadError(f"trace format {format!r} is not one of {', '.join(_FORMATS)}")
    if max_requests is not None and max_requests < 1:
        raise WorkloadError(f"trace max_requests must be >= 1, got {max_requests}")
    p = Path(path)
    records = _read_records(p)
    if not records:
        raise WorkloadError(f"trace {p} has no requests (every line is blank)")
    fmt = _detect_format(p, *records[0]) if format == "auto" else format
    schema = _SCHEMAS[fmt]
    requests = [_parse_request(schema, fmt, record, f"{p}: line {n}", n) for n, record in records]
    requests.sort(key=lambda r: r.timestamp_s)
    if max_requests is not None:
        del requests[max_requests:]
    # Shifted in the file's unit, then converted: 200 ms - 50 ms is 0.15 s, not 0.15000000000000002.
    start = requests[0].timestamp_s
    seconds = tuple(
        replace(r, timestamp_s=(r.timestamp_s - start) / schema.units_per_second) for r in requests
    )
    return Trace(str(p), fmt, seconds)


def _read_records(path: Path) -> list[tuple[int, dict[str, object]]]:
    """Each non-blank line's JSON object with its 1-based line number."""
    if not path.is_file():
        what = "is not a file" if path.exists() else "does not exist"
        raise WorkloadError(f"trace {path} {what}")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise WorkloadError(f"trace {path} could not be read as UTF-8 text: {exc}") from exc
    records = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise WorkloadError(
                f"{path}: line {n}: invalid JSON at column {exc.colno}: {exc.msg}"
            ) from exc
        if not isinstance(value, dict):
            raise WorkloadError(f"{path}: line {n}: a trace record must be a JSON object")
        records.append((n, value))
    return records


def _detect_format(path: Path, n: int, record: dict[str, object]) -> TraceFormat:
    for fmt, schema in _SCHEMAS.items():
        if schema.input_key in record:
            return fmt
    keys = ", ".join(sorted(record)) or "none"
    raise WorkloadError(
        f"{path}: line {n}: cannot tell the trace format: the first record has neither "
        f"input_length (mooncake) nor input_tokens (jsonl); its keys: {keys}"
    )


def _parse_request(
    schema: _Schema, fmt: TraceFormat, record: dict[str, object], where: str, line: int
) -> TraceRequest:
    required = ["timestamp", schema.input_key, schema.output_key]
    if schema.hash_ids_required:
        required.append("hash_ids")
    for key in required:
        if key not in record:
            raise WorkloadError(
                f"{where}: missing {key} (a {fmt} record needs {', '.join(required)})"
            )
    ts = record["timestamp"]
    if not isinstance(ts, int | float) or isinstance(ts, bool) or not math.isfinite(ts):
        unit = "milliseconds" if schema.units_per_second != 1.0 else "seconds"
        raise WorkloadError(f"{where}: timestamp must be a number of {unit}, got {ts!r}")
    hash_ids = record.get("hash_ids", [])
    if not isinstance(hash_ids, list) or not all(_is_int(h) for h in hash_ids):
        shown = repr(hash_ids)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise WorkloadError(f"{where}: hash_ids must be a list of integers, got {shown}")
    return TraceRequest(
        timestamp_s=ts,  # in the file's unit until read_trace converts it
        input_tokens=_positive_int(record, schema.input_key, where),
        output_tokens=_positive_int(record, schema.output_key, where),
        hash_ids=tuple(hash_ids),
        line=line,
    )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _positive_int(record: dict[str, object], key: str, where: str) -> int:
    value = record[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise WorkloadError(f"{where}: {key} must be a positive integer, got {value!r}")
    return value


# A block is built to be exact after the end of its prefix; tokenizers merge only across a
# few characters at a joint, so the prefix's last characters stand for all of it.
_CONTEXT_CHARS = 512
# Tries to join a text to its prefix exactly (sources.exact_suffixes): a trace has thousands
# of joints, and where a prefix ends in spaces each try succeeds with about even odds.
_JOIN_TRIES = 32


@dataclass(frozen=True, slots=True)
class _Unit:
    """The text of one or more identical requests: shared blocks, then a tail of its own."""

    blocks: tuple[int, ...]  # hash ids of the full blocks, whose texts are shared
    tail_tokens: int  # 0: the blocks alone are the prompt
    tail_seed: str  # the tail's generator
    input_tokens: int


async def trace_prompts(
    tokenizer: TargetTokenizer, trace: Trace, block_tokens: int, seed: int | str
) -> list[Prompt]:
    """One prompt per request, in order, with the trace's lengths and its prefix sharing.

    `block_tokens` is the trace's block size (the tokens one hash id stands for: 512 in
    Mooncake's release), whatever the target's context is. Each hash id becomes one block text,
    built once from `seed` and the id, exact in tokens after the prefix it was first seen
    behind; a request's prompt is the texts of its full blocks (input_tokens // block_tokens of
    them), then a tail of the remaining tokens seeded by the hash id of its partial last block
    and the tail's length (so identical requests get identical prompts). The tail is rebuilt
    longer or shorter until the whole prompt counts exactly input_tokens in the tokenizer (or
    WorkloadError, naming the line); a prompt of full blocks only that does not count exactly
    (rare: a block exact behind another prefix than this request's) has its last block replaced
    by such a tail. Requests sharing their first k hash ids thus share the same first k block
    texts: the same string prefix, hence the same tokens up to the joint after it, where the
    tokenizer may split the last few characters differently. A request without hash ids, or a
    partial last block without one, gets a text of its own; hash ids beyond the ones its length
    needs are ignored.
    """
    if block_tokens < 1:
        raise WorkloadError(f"trace block_tokens must be >= 1, got {block_tokens}")
    units = [_unit(trace, i, block_tokens, seed) for i in range(trace.count)]
    texts = await _block_texts(tokenizer, units, block_tokens, seed)
    by_unit = await _unit_texts(tokenizer, trace, units, texts, block_tokens, seed)
    return [
        Prompt(by_unit[unit], r.input_tokens, r.output_tokens)
        for unit, r in zip(units, trace.requests, strict=True)
    ]


def _unit(trace: Trace, i: int, block_tokens: int, seed: int | str) -> _Unit:
    r = trace.requests[i]
    own = f"moeperf.trace.own:{seed}:{i}"
    if not r.hash_ids:
        return _Unit((), r.input_tokens, own, r.input_tokens)
    n_full, tail = divmod(r.input_tokens, block_tokens)
    if len(r.hash_ids) < n_full:
        raise WorkloadError(
            f"{trace.path}: line {r.line}: {r.input_tokens} input tokens are {n_full} full "
            f"blocks of {block_tokens} tokens, but hash_ids has only {len(r.hash_ids)}; is "
            f"block_tokens {block_tokens} the trace's block size?"
        )
    tail_seed = _tail_seed(seed, r.hash_ids[n_full], tail) if len(r.hash_ids) > n_full else own
    return _Unit(r.hash_ids[:n_full], tail, tail_seed if tail else "", r.input_tokens)


def _tail_seed(seed: int | str, hash_id: int, n_tokens: int) -> str:
    return f"moeperf.trace.tail:{seed}:{hash_id}:{n_tokens}"


async def _block_texts(
    tokenizer: TargetTokenizer, units: list[_Unit], block_tokens: int, seed: int | str
) -> dict[int, str]:
    """Each hash id's block text, built one depth at a time (a block is exact behind the
    blocks before it where it was first seen, or nearly, where that join failed every try),
    each depth in one batch."""
    texts: dict[int, str] = {}
    for depth in range(max((len(u.blocks) for u in units), default=0)):
        new: dict[int, int] = {}  # hash id -> the first unit with it at this depth
        for k, u in enumerate(units):
            if depth < len(u.blocks) and u.blocks[depth] not in texts:
                new.setdefault(u.blocks[depth], k)
        if not new:
            continue
        ids = list(new)
        contexts = [_context(texts, units[new[h]].blocks[:depth]) for h in ids]
        context_tokens = await tokenizer.acount_many(contexts)
        rngs = [random.Random(f"moeperf.trace.block:{seed}:{h}") for h in ids]
        targets = [n + block_tokens for n in context_tokens]
        try:
            built = await exact_suffixes(
                tokenizer, contexts, targets, [block_tokens] * len(ids), rngs, _JOIN_TRIES
            )
        except JoinError as exc:  # not fatal: the prompts' tails make up for the inexact ones
            built = exc.suffixes
        texts.update(zip(ids, built, strict=True))
    return texts


def _context(texts: dict[int, str], chain: tuple[int, ...]) -> str:
    """The last _CONTEXT_CHARS characters of the chain's blocks, joining only those needed."""
    parts: list[str] = []
    chars = 0
    for h in reversed(chain):
        if chars >= _CONTEXT_CHARS:
            break
        parts.append(texts[h])
        chars += len(texts[h])
    return "".join(reversed(parts))[-_CONTEXT_CHARS:]


async def _unit_texts(
    tokenizer: TargetTokenizer,
    trace: Trace,
    units: list[_Unit],
    texts: dict[int, str],
    block_tokens: int,
    seed: int | str,
) -> dict[_Unit, str]:
    """Each distinct unit's exact prompt text."""
    first: dict[_Unit, int] = {}  # unit -> its first request, for errors
    for i, u in enumerate(units):
        first.setdefault(u, i)
    done: dict[_Unit, str] = {}
    blocks_only = [u for u in first if not u.tail_tokens]
    counts = await tokenizer.acount_many(["".join(texts[h] for h in u.blocks) for u in blocks_only])
    tailed: list[tuple[_Unit, _Unit]] = []  # (the unit, the one its text is built as)
    for u, got in zip(blocks_only, counts, strict=True):
        if got == u.input_tokens:
            done[u] = "".join(texts[h] for h in u.blocks)
        else:  # the joints merged or split tokens: the last block becomes a tail
            last = u.blocks[-1]
            seed_of = _tail_seed(seed, last, block_tokens)
            tailed.append((u, _Unit(u.blocks[:-1], block_tokens, seed_of, u.input_tokens)))
    tailed += [(u, u) for u in first if u.tail_tokens]
    prefixes = ["".join(texts[h] for h in built_as.blocks) for _, built_as in tailed]
    try:
        suffixes = await exact_suffixes(
            tokenizer,
            prefixes,
            [built_as.input_tokens for _, built_as in tailed],
            [built_as.tail_tokens for _, built_as in tailed],
            [random.Random(built_as.tail_seed) for _, built_as in tailed],
            _JOIN_TRIES,
        )
    except JoinError as exc:
        line = trace.requests[first[tailed[exc.index][0]]].line
        raise WorkloadError(f"{trace.path}: line {line}: {exc}") from exc
    for (u, _), prefix, suffix in zip(tailed, prefixes, suffixes, strict=True):
        done[u] = prefix + suffix
    return done
