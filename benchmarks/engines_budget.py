"""The engines benchmark's error budget (benchmarks/engines.py; its module doc says why
2 ms): whether a level holds it, why not, and the highest stream count each engine holds
it at.

Apart from the runs and the tables: the verdict on a level is its own rule, and the
tables only print it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from engines_results import Engine, LevelResult

# The budget (engines.py's module doc): the harness's own loop-lag bound,
# harness.max_loop_lag_p99_s.
TTFT_BUDGET_S = 0.002
CHUNK_BUDGET_S = 0.002


@dataclass(frozen=True)
class ErrorBudget:
    """How far an engine's stamps may be from the target's write times (p99, seconds)."""

    ttft_p99_s: float = TTFT_BUDGET_S
    chunk_p99_s: float = CHUNK_BUDGET_S

    def describe(self) -> str:
        return (
            f"TTFT error p99 <= {self.ttft_p99_s * 1e3:g} ms and chunk error p99 <= "
            f"{self.chunk_p99_s * 1e3:g} ms, every ok request matched to the ground truth, "
            "level ok (not client-bound)"
        )


def budget_misses(result: LevelResult, budget: ErrorBudget) -> list[str]:
    """Why ``result`` is outside ``budget``; empty when it holds."""
    misses = []
    if result.status != "ok":
        misses.append("client-bound" if result.client_bound else f"level {result.status}")
    if result.unmatched:
        misses.append(f"{result.unmatched} of {result.ok} ok requests unmatched")
    for name, value, bound in (
        ("TTFT", result.ttft.p99, budget.ttft_p99_s),
        ("chunk", result.chunk.p99, budget.chunk_p99_s),
    ):
        if value is None:
            misses.append(f"no {name} error samples")
        elif abs(value) > bound:
            misses.append(f"{name} p99 {value * 1e3:.2f} ms > {bound * 1e3:g} ms")
    return misses


def highest_within(
    results: Iterable[LevelResult], engine: Engine, budget: ErrorBudget
) -> int | None:
    """The highest stream count at which ``engine`` held the budget (None: at none)."""
    held = [r.streams for r in results if r.engine == engine and not budget_misses(r, budget)]
    return max(held, default=None)


def within_line(results: Sequence[LevelResult], engine: Engine, budget: ErrorBudget) -> str:
    """ "asyncio: 64 streams (over budget at 256: client-bound)"."""
    best = highest_within(results, engine, budget)
    over = [
        f"{r.streams}: {', '.join(budget_misses(r, budget))}"
        for r in sorted(results, key=lambda r: r.streams)
        if r.engine == engine and budget_misses(r, budget)
    ]
    head = f"{engine}: " + ("none" if best is None else f"{best} stream{'s' * (best != 1)}")
    return head + (f" (over budget at {'; '.join(over)})" if over else "")
