"""Benchmark: harness CPU time per request with live export on and off.

``python benchmarks/export_overhead.py`` (``tox -e bench-export``) runs the same short
sweep against the synthetic target in alternating blocks, export off then on, and prints
the median CPU seconds per request of the harness (the parent process, which exports, plus
the load workers, which measure) and their ratio. Alternating blocks in one job keep
machine noise from landing on one arm only. Target scraping stays off in both arms: it
loads the target, not the harness.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from rich.console import Console
from rich.table import Table

from moeperf.collectors.serving_records import ServingSummary
from moeperf.collectors.store import RunStore
from moeperf.specs import validate_spec
from moeperf.suites.serving.runner import run_serving


def _spec(live: bool, streams: int, duration_s: float) -> dict:
    return {
        "name": "export-overhead",
        "target": {"kind": "synthetic", "synthetic": {"ttft_s": 0.02, "itl_s": 0.005}},
        "workload": {"input_tokens": {"mean": 32}, "output_tokens": {"mean": 32}},
        "load": {"levels": [streams], "duration_s": duration_s, "warmup_s": 0.5,
                 "cooldown_s": 0.0, "workers": 1},
        "export": {"live_metrics": live, "scrape_target": False},
    }  # fmt: skip


def _cpu_per_request(store: RunStore, live: bool, streams: int, duration_s: float) -> float:
    loaded = validate_spec(_spec(live, streams, duration_s), "export-overhead")
    parent_start_s = time.process_time()
    run_id = run_serving(loaded.serving, loaded.given, store)
    parent_s = time.process_time() - parent_start_s
    run = store.open(run_id)
    summary = run.summary()
    assert isinstance(summary, ServingSummary)  # run_serving writes one, even when it fails
    workers_s = sum(
        h.selfwatch.cpu_fraction * h.selfwatch.wall_s
        for entry in summary.scenarios.values()
        for h in entry.harness
    )
    return (parent_s + workers_s) / len(run.requests())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3, help="off/on blocks")
    parser.add_argument("--streams", type=int, default=32)
    parser.add_argument("--duration-s", type=float, default=6.0)
    args = parser.parse_args(argv)
    console = Console()
    results: dict[bool, list[float]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as runs:
        store = RunStore(runs)
        for block in range(args.pairs):
            for live in (False, True):
                cost = _cpu_per_request(store, live, args.streams, args.duration_s)
                results[live].append(cost)
                arm = "on " if live else "off"
                console.print(f"block {block + 1}: export {arm} {cost * 1e3:.3f} ms CPU/request")
    off, on = statistics.median(results[False]), statistics.median(results[True])
    table = Table(title=f"harness CPU per request, {args.streams} streams, median of {args.pairs}")
    for column in ("export off (ms)", "export on (ms)", "extra"):
        table.add_column(column, justify="right")
    table.add_row(f"{off * 1e3:.3f}", f"{on * 1e3:.3f}", f"{(on / off - 1):+.1%}")
    console.print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
