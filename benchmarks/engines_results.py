"""What the engines benchmark (benchmarks/engines.py) keeps of one engine at one stream
count: the level's status, its requests matched to the target's ground truth, its
measurement errors' p50 and p99, and the workers' loop lag and CPU, from the run's summary.

Apart from the benchmark's runs: the budget and the tables (engines_budget.py,
engines_tables.py) read only these records, and they are tested without a run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from moeperf.collectors.quantiles import Described
from moeperf.collectors.serving_records import ScenarioSummary, ServingSummary

Engine = Literal["asyncio", "locust"]
ENGINES: tuple[Engine, Engine] = ("asyncio", "locust")


@dataclass(frozen=True)
class Quantiles:
    """p50 and p99 of an error, seconds (None: no samples)."""

    p50: float | None
    p99: float | None

    @staticmethod
    def of(described: Described) -> Quantiles:
        return Quantiles(described.value_at(0.5), described.value_at(0.99))


NO_SAMPLES = Quantiles(None, None)


@dataclass(frozen=True)
class LevelResult:
    """One engine at one stream count, as its run's summary has it."""

    engine: Engine
    streams: int
    run_status: str
    status: str  # the level's: ok / failed / invalid
    status_reason: str | None
    client_bottleneck: tuple[str, ...]
    requests: int  # measured (after warm-up)
    ok: int
    matched: int  # ok requests compared with the target's write times
    unmatched: int
    ttft: Quantiles
    itl: Quantiles
    chunk: Quantiles
    loop_lag_p99_s: tuple[float, ...]  # per worker
    loop_lag_max_s: tuple[float, ...]  # per worker
    cpu_fraction: tuple[float, ...]  # per worker, of one core
    wall_s: float  # the whole run: target start to summary

    @property
    def client_bound(self) -> bool:
        return bool(self.client_bottleneck)


def level_result(
    engine: Engine, streams: int, run_status: str, summary: ServingSummary, wall_s: float
) -> LevelResult:
    """The result of a one-level run from its summary (a run that stored no level: zeros)."""
    entries = list(summary.scenarios.values())
    if len(entries) > 1:
        raise ValueError(f"expected one level, the summary has {len(entries)}")
    entry: ScenarioSummary | None = entries[0] if entries else None
    if entry is None:
        return LevelResult(engine, streams, run_status, "invalid", "no level in the summary",
                           (), 0, 0, 0, 0, NO_SAMPLES, NO_SAMPLES, NO_SAMPLES, (), (), (),
                           wall_s)  # fmt: skip
    errors = entry.harness_error_s
    workers = sorted(entry.harness, key=lambda w: w.worker)
    return LevelResult(
        engine=engine,
        streams=streams,
        run_status=run_status,
        status=entry.status,
        status_reason=entry.status_reason,
        client_bottleneck=tuple(entry.client_bottleneck),
        requests=entry.requests,
        ok=entry.ok,
        matched=errors.matched_requests if errors else 0,
        unmatched=errors.unmatched_requests if errors else entry.ok,
        ttft=Quantiles.of(errors.ttft) if errors else NO_SAMPLES,
        itl=Quantiles.of(errors.itl) if errors else NO_SAMPLES,
        chunk=Quantiles.of(errors.chunk) if errors else NO_SAMPLES,
        loop_lag_p99_s=tuple(w.selfwatch.loop_lag_p99_s for w in workers),
        loop_lag_max_s=tuple(w.selfwatch.loop_lag_max_s for w in workers),
        cpu_fraction=tuple(w.selfwatch.cpu_fraction for w in workers),
        wall_s=wall_s,
    )
