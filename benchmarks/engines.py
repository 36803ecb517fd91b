"""Benchmark: the Locust engine's measurement error beside the asyncio engine's.

    python benchmarks/engines.py [--streams 1,16,64,256] [--duration-s 8] [--workers 2]
                                    [--ttft-budget-ms 2] [--chunk-budget-ms 2]
                                    [--set KEY=VALUE ...]   (tox -e bench-engines)

At each stream count the same closed-loop level runs against the embedded synthetic
target (ground truth: it records when it wrote each chunk) once with each engine,
interleaved in one job (asyncio then Locust at the first count, Locust then asyncio at the
next, and so on), so machine noise does not land on one engine only. Each run is a real
serving run through ``run_serving``, in a runs directory under a temporary folder, with the
same number of local load worker processes for both engines (``--workers``; the Locust
engine adds its master process). The target is fixed, as in ``moeperf calibrate``: TTFT
50 ms, 10 ms per token, no jitter, one token per chunk, but 32 output tokens (twice the
requests, so twice the TTFT samples, for the same chunks per second); live export and
target scraping are off, so the harness alone is measured.

From each run's summary: the level's measured requests, how many ok ones were matched to
the target's write times (and not), the TTFT error (first token's arrival minus its write),
the ITL error (measured per-token gap minus the server's) and the chunk error (each chunk's
arrival minus its write) at p50 and p99, all signed (positive: stamped late), in ms; the
workers' event-loop lag (p99 of the worst worker, and the longest lag any worker saw: the
p99 of a probe every 10 ms can miss a rare long stall that the error's tail does not) and
CPU (each worker's share of a core); the level's status (invalid when client-bound, with
the harness's reason, printed under the table).

The error budget (``--ttft-budget-ms``, ``--chunk-budget-ms``; engines_budget.py's constants): a
level holds when its TTFT error p99 and chunk error p99 are both within 2 ms, every ok
request was matched to the ground truth, and the harness judged the level ok (not
client-bound, not failed). 2 ms is the harness's own bound on event-loop lag
(``harness.max_loop_lag_p99_s``): a chunk is stamped late by about the loop's lag, so the
same bound on the error itself is the precision the harness already claims for a valid
level; it is a fifth of the 10 ms token gap. p99 rather than p50 because an engine that is
right at the median and late in the tail moves TTFT p99 and ITL p99, the figures users gate
on. The chunk error bounds the ITL error (a gap's error is the difference of two chunk
errors), and unlike the signed ITL error its p99 is its tail. The table is followed by the
highest stream count within budget per engine.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import socket
import statistics
import tempfile
import time
from typing import Any

from engines_budget import CHUNK_BUDGET_S, TTFT_BUDGET_S, ErrorBudget, within_line
from engines_results import ENGINES, Engine, LevelResult, level_result
from engines_tables import markdown_table, ms_text, results_table
from rich.console import Console

from moeperf.collectors.serving_records import ServingSummary
from moeperf.collectors.sources.fingerprint import host_fingerprint
from moeperf.collectors.store import RunStore
from moeperf.specs import LoadedSpec, validate_spec
from moeperf.suites.errors import SuiteError, UsageError
from moeperf.suites.serving.runner import run_serving

STREAMS = (1, 16, 64, 256)
DURATION_S = 8.0
WARMUP_S = 1.0
WORKERS = 2
TTFT_S = 0.05
ITL_S = 0.01
OUTPUT_TOKENS = 32
WIDTH = 200  # columns the table is printed in, at least: one row per stream count


def engines_spec(
    engine: Engine,
    streams: int,
    *,
    duration_s: float = DURATION_S,
    workers: int = WORKERS,
    ttft_s: float = TTFT_S,
    itl_s: float = ITL_S,
    output_tokens: int = OUTPUT_TOKENS,
) -> dict[str, Any]:
    """One closed-loop level of ``streams`` against the synthetic target, with ``engine``."""
    return {
        "name": f"engines-{engine}",
        "description": "measurement error of a load engine against the synthetic target",
        "target": {"kind": "synthetic", "api": "chat",
                   "synthetic": {"ttft_s": ttft_s, "itl_s": itl_s, "tokens_per_chunk": 1,
                                 "jitter": "none", "jitter_scale": 0.0, "seed": 0}},
        "workload": {"kind": "random", "num_prompts": 64, "tokenizer": "server", "seed": 0,
                     "input_tokens": {"dist": "fixed", "mean": 32},
                     "output_tokens": {"dist": "fixed", "mean": output_tokens}},
        "load": {"mode": "concurrency", "levels": [streams], "duration_s": duration_s,
                 "warmup_s": min(WARMUP_S, duration_s / 4), "cooldown_s": 0.0,
                 "workers": workers, "engine": engine, "seed": 0},
        # The harness alone: no live export or target scraping in the measured process.
        "export": {"live_metrics": False, "scrape_target": False},
    }  # fmt: skip


def engine_order(index: int) -> tuple[Engine, Engine]:
    """The engines in the order they run at the ``index``-th stream count: alternating,
    so neither always runs first (on a host warmed, or loaded, by the run before)."""
    return ENGINES if index % 2 == 0 else (ENGINES[1], ENGINES[0])


def level_spec(engine: Engine, streams: int, args: argparse.Namespace) -> LoadedSpec:
    """The validated spec of one run (``--set`` overrides applied): a bad override is a
    ``UsageError`` before anything runs."""
    spec = engines_spec(
        engine,
        streams,
        duration_s=args.duration_s,
        workers=args.workers,
        output_tokens=args.output_tokens,
    )
    return validate_spec(spec, f"engines-{engine}", args.set)


def run_level(store: RunStore, engine: Engine, streams: int, loaded: LoadedSpec) -> LevelResult:
    """One run of one level with ``engine``, through ``run_serving`` as ``moeperf run``. A
    run that raises is a result too (status "error", with what it raised): the other runs
    still go on."""
    started = time.perf_counter()
    try:
        run_id = run_serving(loaded.serving, loaded.given, store)
    except SuiteError as error:
        wall_s = time.perf_counter() - started
        failed = level_result(engine, streams, "error", ServingSummary(), wall_s)
        return dataclasses.replace(failed, status="error", status_reason=f"run raised: {error}")
    wall_s = time.perf_counter() - started
    reader = store.open(run_id)
    summary = reader.summary()
    if not isinstance(summary, ServingSummary):
        summary = ServingSummary()  # the run ended before it wrote one
    return level_result(engine, streams, reader.manifest.status, summary, wall_s)


def _streams(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"--streams: comma-separated integers ({error})") from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError("--streams: one or more counts >= 1")
    return counts


def _host_line() -> str:
    host = host_fingerprint()
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"{now}, host {socket.gethostname()}: {host['cpu_model']}, "
        f"{host['usable_cores']} usable cores, load average {load}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--streams",
        type=_streams,
        default=STREAMS,
        help="stream counts, comma-separated (default 1,16,64,256)",
    )
    parser.add_argument(
        "--duration-s",
        type=float,
        default=DURATION_S,
        help=f"each level's duration, warm-up ({WARMUP_S:g} s) included",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=WORKERS,
        help="local load worker processes, both engines (Locust: + its master)",
    )
    parser.add_argument("--output-tokens", type=int, default=OUTPUT_TOKENS)
    parser.add_argument("--ttft-budget-ms", type=float, default=TTFT_BUDGET_S * 1e3)
    parser.add_argument("--chunk-budget-ms", type=float, default=CHUNK_BUDGET_S * 1e3)
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown too")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a spec override for every run (as moeperf run --set)",
    )
    args = parser.parse_args(argv)
    budget = ErrorBudget(args.ttft_budget_ms / 1e3, args.chunk_budget_ms / 1e3)
    console = Console(width=max(Console().width, WIDTH))
    host = _host_line()
    console.print(host)
    results: list[LevelResult] = []
    started = time.perf_counter()
    try:
        specs = {(s, e): level_spec(e, s, args) for s in args.streams for e in ENGINES}
    except UsageError as error:
        console.print(f"error: {error}", markup=False)
        return 2
    with tempfile.TemporaryDirectory(prefix="moeperf-bench-engines-") as runs:
        store = RunStore(runs)
        for index, streams in enumerate(args.streams):
            for engine in engine_order(index):
                result = run_level(store, engine, streams, specs[streams, engine])
                results.append(result)
                console.print(
                    f"{streams} streams, {engine}: {result.requests} requests, TTFT error "
                    f"p99 {ms_text(result.ttft.p99)} ms, chunk error p99 "
                    f"{ms_text(result.chunk.p99)} ms, level {result.status} ({result.wall_s:.1f} s)"
                )
    total_s = time.perf_counter() - started
    title = (
        f"measurement error against the synthetic target's write times (signed, arrival "
        f"minus write; ms): TTFT {TTFT_S * 1e3:g} ms, {ITL_S * 1e3:g} ms/token, "
        f"{args.output_tokens} tokens, {args.duration_s:g} s per level, {args.workers} "
        "local worker(s) per engine"
    )
    console.print(results_table(results, budget, title))
    for result in results:
        if result.status_reason:
            console.print(f"{result.streams} streams, {result.engine}: {result.status_reason}")
    console.print(f"error budget: {budget.describe()}")
    console.print("highest stream count within budget:")
    for engine in ENGINES:
        console.print(f"  {within_line(results, engine, budget)}")
    walls = [r.wall_s for r in results]
    console.print(
        f"{host}; {len(results)} runs in {total_s:.0f} s "
        f"(median {statistics.median(walls):.1f} s per run)"
    )
    if args.markdown:
        print(markdown_table(results, budget), flush=True)  # unwrapped, for a README
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
