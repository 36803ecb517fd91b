"""``moeperf calibrate``: the harness's own measurement error at rising concurrency.

It drives the synthetic target (known latencies, its own write times read back) and
reports, per level, the TTFT and ITL error at p50 and p99, and the first level where the
error leaves its budget or the run marks the level client-bound.
"""

from __future__ import annotations

import argparse

from rich.console import Console

from collectors.store import RunStore
from suites.errors import UsageError
from suites.present import ProgressBar, announce_run, calibration_verdict, harness_error_table
from suites.serving.runner import run_serving
from suites.spec import ServingSpec

# The goals of issue 2 at 64 streams: |p50 error| <= 1 ms (TTFT) and <= 0.5 ms (ITL).
ERROR_BUDGET_S = {"ttft_p50_s": 0.001, "itl_p50_s": 0.0005}


def calibration_spec(args: argparse.Namespace) -> dict:
    try:
        levels = [int(x) for x in str(args.levels).split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--levels {args.levels!r}: expected integers like 1,16,64,256") from None
    workers = args.workers if args.workers == "auto" else int(args.workers)
    return {
        "name": "calibrate",
        "description": "harness measurement error against the synthetic target",
        "target": {"kind": "synthetic", "synthetic": {"ttft_s": args.ttft_s, "itl_s": args.itl_s}},
        "workload": {
            "kind": "random",
            "input_tokens": {"mean": 32},
            "output_tokens": {"mean": args.output_tokens},
            "num_prompts": 64,
        },
        "load": {
            "mode": "concurrency",
            "levels": levels,
            "duration_s": args.duration_s,
            "warmup_s": min(1.0, args.duration_s / 4),
            "cooldown_s": 0.0,
            "workers": workers,
        },
        # The harness alone: no live export or target scraping in the measured process.
        "export": {"live_metrics": False, "scrape_target": False},
    }


def run_calibration(args: argparse.Namespace, store: RunStore, console: Console) -> int:
    given = calibration_spec(args)
    try:
        spec = ServingSpec.model_validate(given)
    except ValueError as exc:
        raise UsageError(f"calibrate: {exc}") from None
    bar = ProgressBar(console)
    try:
        run_id = run_serving(spec, given, store, bar, lambda run: announce_run(run, console))
    finally:
        bar.close()
    summary = store.open(run_id).summary() or {"scenarios": {}}
    console.print(harness_error_table(summary, ERROR_BUDGET_S))
    over = [
        scenario
        for scenario, entry in summary["scenarios"].items()
        if entry.get("harness_error_s")
        and calibration_verdict(entry, ERROR_BUDGET_S) != "within budget"
    ]
    budget = (
        f"|p50| <= {ERROR_BUDGET_S['ttft_p50_s'] * 1e3:g} ms TTFT, "
        f"<= {ERROR_BUDGET_S['itl_p50_s'] * 1e3:g} ms ITL"
    )
    if over:
        verdict = calibration_verdict(summary["scenarios"][over[0]], ERROR_BUDGET_S)
        console.print(f"budget ({budget}) first not met at {over[0]}: {verdict}")
    else:
        console.print(f"within budget ({budget}) at every level")
    console.print(f"results: {store.root / run_id}")
    return 0
