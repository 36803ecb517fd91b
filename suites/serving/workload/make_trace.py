"""Synthetic request traces in Mooncake's format
(`python -m moeperf.suites.serving.workload.make_trace`).

A stand-in for a recorded trace with the structure that matters to a serving system: when
requests arrive, how long they are, and which prompt blocks they share (the prefix cache's
hits). It writes JSONL that `trace.read_trace` reads as "mooncake": `{"timestamp": <ms>,
"input_length": int, "output_length": int, "hash_ids": [int, ...]}`, one hash id per block of
`block_tokens` prompt tokens (the last block may be partial: len(hash_ids) ==
ceil(input_length / block_tokens)), equal ids for equal blocks.

How a trace is drawn, request by request, from one numpy generator seeded with `--seed` (the
same seed and flags give the same file, on the same numpy):

- Arrivals: gaps between requests are gamma-distributed with mean 1 / rate; shape 1 (the
  default `--burstiness`) is a Poisson process, below 1 is burstier (coefficient of variation
  1 / sqrt(shape)). The first request is at 0 ms.
- Follow-up turns: with probability `--followup-share`, a request continues one of the last
  `_RECENT` requests, chosen uniformly: its hash ids start with all of that request's full
  blocks (its partial last block is not shared: the next turn's text fills it differently),
  then add `--user-blocks` new blocks. If that would pass `--input-tokens`' maximum, the request
  starts a new conversation instead.
- New conversations: with probability `--system-share`, start with one of `--system-prompts`
  shared system prompts (each `--system-blocks` full blocks long, drawn once), picked with Zipf
  popularity (weight 1 / rank^`--zipf`), then add `--user-blocks` new blocks.
- Lengths: the new blocks' last one is partial (1 to block_tokens tokens, uniform), and the
  input length is clipped into `--input-tokens`. Output lengths are log-uniform between the
  `--output-tokens` bounds.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from moeperf.suites.serving.workload.sources import WorkloadError
from moeperf.suites.serving.workload.trace import TraceRequest

# How far back a follow-up turn looks for the conversation it continues, in requests.
_RECENT = 16
EXIT_USAGE = 2


@dataclass(frozen=True, slots=True)
class TraceShape:
    """What a synthetic trace looks like; (min, max) pairs are inclusive."""

    requests: int
    rate: float  # mean requests per second
    block_tokens: int = 512  # Mooncake's release
    burstiness: float = 1.0  # gamma shape of the gaps: 1 is Poisson, < 1 burstier
    system_prompts: int = 4
    system_blocks: tuple[int, int] = (1, 4)
    zipf: float = 1.2
    system_share: float = 0.6  # of new conversations
    followup_share: float = 0.3  # of requests
    user_blocks: tuple[int, int] = (1, 4)  # new blocks per request, the last one partial
    input_tokens: tuple[int, int] = (1, 16384)
    output_tokens: tuple[int, int] = (16, 512)

    def __post_init__(self) -> None:
        _require(self.requests >= 1, f"requests must be >= 1, got {self.requests}")
        _require(self.rate > 0, f"rate must be > 0 requests/s, got {self.rate}")
        _require(self.block_tokens >= 1, f"block_tokens must be >= 1, got {self.block_tokens}")
        _require(self.burstiness > 0, f"burstiness must be > 0, got {self.burstiness}")
        _require(self.system_prompts >= 0, f"system_prompts must be >= 0: {self.system_prompts}")
        _require(self.zipf >= 0, f"zipf must be >= 0, got {self.zipf}")
        for name in ("system_share", "followup_share"):
            share = getattr(self, name)
            _require(0 <= share <= 1, f"{name} must be in [0, 1], got {share}")
        for name, low in (
            ("system_blocks", 1),
            ("user_blocks", 1),
            ("input_tokens", 1),
            ("output_tokens", 1),
        ):
            lo, hi = getattr(self, name)
            _require(low <= lo <= hi, f"{name} must be MIN MAX with {low} <= MIN <= MAX: {lo} {hi}")
        longest_system = self.system_blocks[1] * self.block_tokens
        _require(
            self.system_prompts == 0 or longest_system < self.input_tokens[1],
            f"system prompts of up to {longest_system} tokens leave no room below the "
            f"input_tokens maximum {self.input_tokens[1]}",
        )


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise WorkloadError(f"trace shape: {message}")


def make_trace(shape: TraceShape, seed: int) -> list[TraceRequest]:
    """The requests of a synthetic trace (timestamps whole milliseconds), in arrival order."""
    rng = np.random.default_rng(seed)
    b = shape.block_tokens
    next_id = 0

    def fresh(n: int) -> list[int]:
        nonlocal next_id
        next_id += n
        return list(range(next_id - n, next_id))

    systems = [
        fresh(int(rng.integers(shape.system_blocks[0], shape.system_blocks[1] + 1)))
        for _ in range(shape.system_prompts)
    ]
    weights = 1.0 / np.arange(1, shape.system_prompts + 1) ** shape.zipf
    popularity = weights / weights.sum()
    gaps = rng.gamma(shape.burstiness, 1.0 / (shape.rate * shape.burstiness), shape.requests)
    gaps[0] = 0.0
    times_ms = np.rint(np.cumsum(gaps) * 1000.0).astype(np.int64)
    low, high = shape.input_tokens
    out: list[TraceRequest] = []
    for i in range(shape.requests):
        user_blocks = int(rng.integers(shape.user_blocks[0], shape.user_blocks[1] + 1))
        user_tokens = (user_blocks - 1) * b + int(rng.integers(1, b + 1))
        prefix: tuple[int, ...] = ()
        followup = bool(out) and rng.random() < shape.followup_share
        parent = out[-1 - int(rng.integers(0, min(_RECENT, len(out))))] if followup else None
        if parent is not None and len(parent.hash_ids) > 0:
            prefix = parent.hash_ids[: parent.input_tokens // b]
        if parent is None or len(prefix) * b + user_tokens > high:
            prefix = ()
            if systems and rng.random() < shape.system_share:
                prefix = tuple(systems[int(rng.choice(len(systems), p=popularity))])
        input_tokens = min(high, max(low, len(prefix) * b + user_tokens))
        n_blocks = -(-input_tokens // b)
        output_tokens = _log_uniform(rng, *shape.output_tokens)
        hash_ids = (*prefix, *fresh(n_blocks - len(prefix)))
        out.append(TraceRequest(int(times_ms[i]) / 1000.0, input_tokens, output_tokens, hash_ids))
    return out


def _log_uniform(rng: np.random.Generator, low: int, high: int) -> int:
    return min(high, max(low, round(float(np.exp(rng.uniform(np.log(low), np.log(high)))))))


def mooncake_lines(requests: Sequence[TraceRequest]) -> str:
    """The requests as Mooncake JSONL: timestamps in whole milliseconds, one object a line."""
    return "".join(
        json.dumps(
            {
                "timestamp": round(r.timestamp_s * 1000.0),
                "input_length": r.input_tokens,
                "output_length": r.output_tokens,
                "hash_ids": list(r.hash_ids),
            }
        )
        + "\n"
        for r in requests
    )


def shared_first_block_share(requests: Sequence[TraceRequest]) -> float:
    """The share of requests whose first hash id is also another request's first."""
    firsts = [r.hash_ids[0] for r in requests if r.hash_ids]
    counts: dict[int, int] = {}
    for h in firsts:
        counts[h] = counts.get(h, 0) + 1
    return sum(counts[h] > 1 for h in firsts) / len(requests) if requests else 0.0


def _parser() -> argparse.ArgumentParser:
    d = TraceShape(requests=1, rate=1.0)  # the defaults, shown in --help
    parser = argparse.ArgumentParser(
        prog="python -m moeperf.suites.serving.workload.make_trace",
        description="Write a synthetic request trace in Mooncake's JSONL format.",
    )
    parser.add_argument("--out", required=True, help="the JSONL file to write")
    parser.add_argument("--requests", type=int, required=True)
    parser.add_argument("--rate", type=float, required=True, help="mean requests per second")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--block-tokens", type=int, default=d.block_tokens)
    parser.add_argument(
        "--burstiness", type=float, default=d.burstiness, help="gamma shape (1: Poisson)"
    )
    parser.add_argument("--system-prompts", type=int, default=d.system_prompts)
    _add_pair(parser, "--system-blocks", d.system_blocks, "blocks per system prompt")
    parser.add_argument("--zipf", type=float, default=d.zipf, help="system prompt popularity")
    parser.add_argument("--system-share", type=float, default=d.system_share)
    parser.add_argument("--followup-share", type=float, default=d.followup_share)
    _add_pair(parser, "--user-blocks", d.user_blocks, "new blocks per request")
    _add_pair(parser, "--input-tokens", d.input_tokens, "input length bounds")
    _add_pair(parser, "--output-tokens", d.output_tokens, "output length bounds")
    return parser


def _add_pair(
    parser: argparse.ArgumentParser, flag: str, default: tuple[int, int], help: str
) -> None:
    parser.add_argument(flag, nargs=2, type=int, metavar=("MIN", "MAX"), default=default, help=help)


def _pair(value: Sequence[int]) -> tuple[int, int]:
    return value[0], value[1]


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        shape = TraceShape(
            requests=args.requests,
            rate=args.rate,
            block_tokens=args.block_tokens,
            burstiness=args.burstiness,
            system_prompts=args.system_prompts,
            system_blocks=_pair(args.system_blocks),
            zipf=args.zipf,
            system_share=args.system_share,
            followup_share=args.followup_share,
            user_blocks=_pair(args.user_blocks),
            input_tokens=_pair(args.input_tokens),
            output_tokens=_pair(args.output_tokens),
        )
    except WorkloadError as exc:
        print(f"make_trace: {exc}", file=sys.stderr)
        return EXIT_USAGE
    requests = make_trace(shape, args.seed)
    Path(args.out).write_text(mooncake_lines(requests), encoding="utf-8")
    inputs = [r.input_tokens for r in requests]
    print(
        f"wrote {len(requests)} requests over {requests[-1].timestamp_s:.3f} s to {args.out}: "
        f"input {min(inputs)}-{max(inputs)} tokens, "
        f"{shared_first_block_share(requests):.0%} share their first block"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
