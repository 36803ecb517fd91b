"""``python benchmarks/reference_models.py``: the two reference models side by side.

Runs the shipped ``reference-models`` spec (a sweep over 256, 2,048 and 4,064 prompt
tokens at 1, 4 and 16 streams, 32 output tokens each) once on the Mixtral-style default
model and once on the hybrid (Qwen3-Next) model, each a stored run made by the path
``moeperf run`` takes, and prints per (model, context, streams): output tokens/s, TTFT
p50, TPOT p50, and the KV and linear-state bytes one sequence holds (the one-stream
level's highest scrape of the engine's own gauges), beside the memory planner's figures.

This host's harness shares 2 cores with the engine, so the harness limits that flag a
client-bound level are relaxed (``--set`` of the bench, printed); the numbers are the
engine's on this host, not a GPU's.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

from moeperf.cli import main as moeperf_main
from moeperf.collectors.serving_records import ServingSummary
from moeperf.collectors.store import RunStore

MODELS = ("default", "hybrid")
RELAXED = ("harness.max_loop_lag_p99_s=1.0", "harness.max_cpu_fraction=1.0")


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:,.1f}"


def _bytes(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def run(runs_dir: Path, overrides: Sequence[str]) -> Table:
    table = Table(title="reference models: the default (Mixtral-style) and the hybrid (Qwen3-Next)")
    for column in ("model", "prompt tokens", "streams", "status", "output tok/s",
                   "TTFT p50 ms", "TPOT p50 ms", "KV bytes/seq (measured / planned)",
                   "state bytes/seq (measured / planned)"):  # fmt: skip
        table.add_column(column, justify="left" if column in ("model", "status") else "right")
    for model in MODELS:
        args = ["--runs-dir", str(runs_dir), "run", "reference-models"]
        for override in (f'target.reference.model_dir="{model}"', *RELAXED, *overrides):
            args += ["--set", override]
        code = moeperf_main(args)
        summary = RunStore(runs_dir).open("latest").summary()
        if not isinstance(summary, ServingSummary) or summary.sweep is None:
            raise SystemExit(f"{model}: the run ended with exit {code} and no sweep summary")
        plan = summary.sweep.plan
        for point in summary.sweep.points:
            planned = plan.point(point.input_tokens) if plan is not None else None
            one = None
            for name in point.scenarios:
                entry = summary.scenarios[name]
                counters = entry.target_counters
                if entry.level == 1 and counters is not None:
                    one = counters
            for name in point.scenarios:
                entry = summary.scenarios[name]
                latency = entry.latency_s
                kv = f"{_bytes(one.kv_bytes_used_max if one else None)} / " + (
                    _bytes(planned.kv_bytes_per_sequence) if planned else "-"
                )
                state = f"{_bytes(one.linear_state_bytes_used_max if one else None)} / " + (
                    _bytes(plan.state_bytes_per_sequence) if plan else "-"
                )
                table.add_row(
                    model,
                    f"{point.input_tokens:,}",
                    f"{entry.level:g}" if entry.level is not None else "-",
                    entry.status,
                    "-"
                    if entry.output_throughput_tok_s is None
                    else f"{entry.output_throughput_tok_s:,.1f}",
                    _ms(latency.ttft_s.value_at(0.5)),
                    _ms(latency.tpot_s.value_at(0.5)),
                    kv,
                    state,
                )
    return table


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/reference_models.py")
    parser.add_argument("--runs-dir", type=Path, default=Path("runs"))
    parser.add_argument("--set", action="append", default=[], dest="overrides",
                        help="KEY=VALUE for both runs (moeperf run --set)")  # fmt: skip
    args = parser.parse_args(argv)
    console = Console(width=200)
    console.print(f"harness limits relaxed on this host: {', '.join(RELAXED)}")
    console.print(run(args.runs_dir, args.overrides))
    return 0


if __name__ == "__main__":
    sys.exit(main())
