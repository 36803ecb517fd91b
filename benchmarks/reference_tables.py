"""The reference benchmark's tables (rich), from the rows ``reference_bench`` measured.

Presenting only: every number here is a row's field or a ratio of two of them. A value
that could not be measured prints as "n/a", never as zero.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from rich.table import Table

from moeperf.collectors.target_counters import TargetCounters

# The goal for continuous batching: 16 streams give >= 3x one stream's tokens/s.
SCALING_GOAL = 3.0
SCALING_GOAL_STREAMS = 16


@dataclass(frozen=True)
class LevelResult:
    """One load level of one run: what the tables print, and where it came from."""

    part: str
    run_id: str
    run_status: str
    scenario: str
    streams: int
    mtp_tokens: int
    prefix_caching: bool
    requests_ok: int
    requests_failed: int
    output_tok_s: float | None
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    tpot_p50_s: float | None
    counters: TargetCounters | None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _num(value: float | None, spec: str = ".1f", scale: float = 1.0) -> str:
    return "n/a" if value is None else format(value * scale, spec)


def _ratio(value: float | None, base: float | None) -> float | None:
    return value / base if value is not None and base else None


def _requests(row: LevelResult) -> str:
    failed = f" ({row.requests_failed} failed)" if row.requests_failed else ""
    return f"{row.requests_ok}{failed}"


def concurrency_table(rows: Sequence[LevelResult]) -> Table:
    """(a) Output tokens/s per stream count and the ratio to one stream."""
    base = next((r.output_tok_s for r in rows if r.streams == 1), None)
    table = Table(title="(a) output throughput vs concurrency (64 prompt / 64 output tokens)")
    for name in ("streams", "requests", "output tok/s", "x 1 stream", "tokens/step",
                 "TTFT p50 ms", "TPOT p50 ms", "run"):  # fmt: skip
        table.add_column(name, justify="left" if name == "run" else "right")
    for r in sorted(rows, key=lambda r: r.streams):
        per_step = r.counters.generation_tokens_per_engine_step if r.counters else None
        table.add_row(
            str(r.streams),
            _requests(r),
            _num(r.output_tok_s),
            _num(_ratio(r.output_tok_s, base), ".2f"),
            _num(per_step, ".2f"),
            _num(r.ttft_p50_s, ".1f", 1e3),
            _num(r.tpot_p50_s, ".2f", 1e3),
            f"{r.run_id} {r.run_status}",
        )
    at_goal = next((r for r in rows if r.streams == SCALING_GOAL_STREAMS), None)
    if at_goal is not None:
        ratio = _ratio(at_goal.output_tok_s, base)
        verdict = "met" if ratio is not None and ratio >= SCALING_GOAL else "NOT met"
        table.caption = (
            f"goal: >= {SCALING_GOAL:g}x one stream at {SCALING_GOAL_STREAMS} streams: "
            f"{_num(ratio, '.2f')}x, {verdict}. tokens/step = generated tokens / engine steps."
        )
    return table


def mtp_table(rows: Sequence[LevelResult]) -> Table:
    """(b) MTP off against k draft tokens: speed, acceptance, TPOT."""
    base = {r.streams: r.output_tok_s for r in rows if r.mtp_tokens == 0}
    table = Table(title="(b) MTP speculative decoding (64 prompt / 64 output tokens, greedy)")
    for name in ("MTP tokens", "streams", "output tok/s", "x MTP off", "accepted tok/step",
                 "acceptance by position", "TPOT p50 ms", "run"):  # fmt: skip
        table.add_column(name, justify="left" if name in ("run",) else "right")
    for r in sorted(rows, key=lambda r: (r.streams, r.mtp_tokens)):
        c = r.counters
        per_step = c.spec_tokens_per_step if c else None
        if r.mtp_tokens == 0:
            per_step, positions = 1.0, "-"
        else:
            by_position = c.spec_acceptance_by_position if c else None
            positions = " / ".join(f"{a:.2f}" for a in by_position or ()) or "n/a"
        table.add_row(
            str(r.mtp_tokens) if r.mtp_tokens else "off",
            str(r.streams),
            _num(r.output_tok_s),
            _num(_ratio(r.output_tok_s, base.get(r.streams)), ".2f"),
            _num(per_step, ".2f"),
            positions,
            _num(r.tpot_p50_s, ".2f", 1e3),
            f"{r.run_id} {r.run_status}",
        )
    table.caption = (
        "accepted tok/step = 1 + accepted draft tokens / draft rounds (per request and "
        "step); acceptance at position i = drafts whose i-th token was accepted / drafts. "
        "From the target's counters over each level, warm-up and cool-down included."
    )
    return table


def prefix_table(rows: Sequence[LevelResult]) -> Table:
    """(c) Prefix caching on against off: TTFT and the hit ratio."""
    table = Table(title="(c) prefix caching (512-token prompts, 448 shared, 16 output tokens)")
    for name in ("prefix caching", "streams", "requests", "TTFT p50 ms", "TTFT p99 ms",
                 "hit ratio", "output tok/s", "run"):  # fmt: skip
        table.add_column(name, justify="left" if name == "run" else "right")
    for r in sorted(rows, key=lambda r: not r.prefix_caching):
        hit = r.counters.prefix_cache_hit_ratio if r.counters else None
        table.add_row(
            "on" if r.prefix_caching else "off",
            str(r.streams),
            _requests(r),
            _num(r.ttft_p50_s, ".1f", 1e3),
            _num(r.ttft_p99_s, ".1f", 1e3),
            _num(hit, ".3f"),
            _num(r.output_tok_s),
            f"{r.run_id} {r.run_status}",
        )
    table.caption = "hit ratio = prompt tokens served from the prefix cache / tokens looked up"
    return table
