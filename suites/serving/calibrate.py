"""``moeperf calibrate``: the harness's own measurement error at rising concurrency.

It drives the synthetic target (known latencies, its own receive and write times read
back) and reports, per level, the total TTFT error (what a user's TTFT holds beyond the
server's own time) at p50 and p99, its send and receive sides, the E2E and ITL error,
and the first level where the error leaves its budget or the run marks the level
client-bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from rich.console import Console

from moeperf.collectors.serving_records import ServingSummary
from moeperf.collectors.store import RunStore
from moeperf.suites.present import (
    ErrorBudget,
    ProgressBar,
    announce_run,
    calibration_verdict,
    harness_error_table,
)
from moeperf.suites.serving.runner import run_serving
from moeperf.suites.serving.validate import validate_serving

# The goals at 64 streams (issues 2 and 45): |p50 error| <= 1 ms for the total TTFT
# (send side included) and <= 0.5 ms for ITL.
ERROR_BUDGET = ErrorBudget(ttft_p50_s=0.001, itl_p50_s=0.0005)


@dataclass(frozen=True)
class CalibrationOptions:
    """What to calibrate at: the synthetic target's latencies and the load (``moeperf
    calibrate``'s flags, parsed by the CLI)."""

    levels: tuple[int, ...] = (1, 16, 64, 256)  # concurrent streams, one level each
    duration_s: float = 8.0
    ttft_s: float = 0.05
    itl_s: float = 0.01
    output_tokens: int = 64
    workers: int | Literal["auto"] = "auto"
    # The self-check: a delay planted before every send, to be found on the send side.
    planted_send_delay_s: float = 0.0


def calibration_spec(options: CalibrationOptions) -> dict[str, Any]:
    """The spec data of a calibration run, validated as any serving spec is.

    The streams start over a ramp of one request's length (within the warm-up): every
    request takes exactly as long on this target, so streams started at once would send,
    and read their chunks, in step for the whole level, 64 sends at one instant every
    0.69 s at 64 streams; that burst, not the steady load, set the loop's lag p99."""
    warmup_s = min(1.0, options.duration_s / 4)
    request_s = options.ttft_s + options.output_tokens * options.itl_s
    return {
        "name": "calibrate",
        "description": "harness measurement error against the synthetic target",
        "target": {
            "kind": "synthetic",
            "synthetic": {"ttft_s": options.ttft_s, "itl_s": options.itl_s},
        },
        "workload": {
            "kind": "random",
            "input_tokens": {"mean": 32},
            "output_tokens": {"mean": options.output_tokens},
            "num_prompts": 64,
        },
        "load": {
            "mode": "concurrency",
            "levels": list(options.levels),
            "duration_s": options.duration_s,
            "warmup_s": warmup_s,
            "ramp_s": min(warmup_s, request_s),
            "cooldown_s": 0.0,
            "workers": options.workers,
        },
        "harness": {"planted_send_delay_s": options.planted_send_delay_s},
        # The harness alone: no live export or target scraping in the measured process.
        "export": {"live_metrics": False, "scrape_target": False},
    }


def run_calibration(options: CalibrationOptions, store: RunStore, console: Console) -> int:
    given = calibration_spec(options)
    spec = validate_serving(given, "calibrate")
    bar = ProgressBar(console)
    try:
        run_id = run_serving(spec, given, store, bar, lambda run: announce_run(run, console))
    finally:
        bar.close()
    summary = store.open(run_id).summary()
    if not isinstance(summary, ServingSummary):
        summary = ServingSummary()  # the run ended before it wrote one
    console.print(harness_error_table(summary, ERROR_BUDGET))
    over = [
        scenario
        for scenario, entry in summary.scenarios.items()
        if entry.harness_error_s is not None
        and calibration_verdict(entry, ERROR_BUDGET) != "within budget"
    ]
    budget = (
        f"|p50| <= {ERROR_BUDGET.ttft_p50_s * 1e3:g} ms TTFT total, "
        f"<= {ERROR_BUDGET.itl_p50_s * 1e3:g} ms ITL"
    )
    if over:
        verdict = calibration_verdict(summary.scenarios[over[0]], ERROR_BUDGET)
        console.print(
            f"budget ({budget}) first not met at {over[0]}: {verdict}",
            markup=False,
            highlight=False,
        )
    else:
        console.print(f"within budget ({budget}) at every level", markup=False, highlight=False)
    status = store.open(run_id).manifest.status
    code = calibration_exit_code(status)
    if code:
        console.print(
            f"the calibration run ended {status}: exit {code}", markup=False, highlight=False
        )
    console.print(f"results: {store.root / run_id}", markup=False, highlight=False)
    return code


def calibration_exit_code(status: str) -> int:
    """The exit code of a calibration whose run ended with ``status``: `moeperf run`'s rule
    (docs/reference/cli.md): 0 complete, 1 failed, invalid or aborted (calibrate has no
    --warn-only). Error beyond the budget at a valid level is a finding printed above, not
    a failure: finding it is what calibrate is for."""
    return 0 if status == "complete" else 1
