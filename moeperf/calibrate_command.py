"""``moeperf calibrate``: the harness's own measurement error against the synthetic target
(suites/serving/calibrate.py runs it)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, Literal

from rich.console import Console

from moeperf.suites.errors import UsageError

if TYPE_CHECKING:
    from moeperf.suites.serving.calibrate import CalibrationOptions


def _calibration_options(args: argparse.Namespace) -> CalibrationOptions:
    from moeperf.suites.serving.calibrate import CalibrationOptions

    try:
        levels = tuple(int(x) for x in str(args.levels).split(",") if x.strip())
    except ValueError:
        raise UsageError(f"--levels {args.levels!r}: expected integers like 1,16,64,256") from None
    workers: int | Literal["auto"] = "auto"
    if args.workers != "auto":
        try:
            workers = int(args.workers)
        except ValueError:
            raise UsageError(f"--workers {args.workers!r}: expected a number or auto") from None
    if not 0 <= args.plant_send_delay_ms <= 1000:
        raise UsageError(
            f"--plant-send-delay-ms {args.plant_send_delay_ms:g}: expected 0 to 1000 ms"
        )
    return CalibrationOptions(
        levels=levels,
        duration_s=args.duration_s,
        ttft_s=args.ttft_s,
        itl_s=args.itl_s,
        output_tokens=args.output_tokens,
        workers=workers,
        planted_send_delay_s=args.plant_send_delay_ms / 1e3,
    )


def _calibrate(args: argparse.Namespace, console: Console) -> int:
    from moeperf.collectors.store import RunStore
    from moeperf.suites.serving.calibrate import run_calibration

    return run_calibration(_calibration_options(args), RunStore(args.runs_dir), console)


def add_calibrate_command(commands: Any) -> None:
    calibrate = commands.add_parser(
        "calibrate",
        help="measure the harness's own error against the synthetic target",
        description="Drive the embedded synthetic target (known latencies, its own receive "
        "and write times read back) and print the harness's TTFT error per level (total, "
        "and its send and receive sides), its E2E and ITL error. Exit 0 "
        "when the run completes, 1 when it ends invalid (a level was client-bound), failed "
        "or aborted, 2 for bad flags.",
    )
    calibrate.add_argument(
        "--levels",
        default="1,16,64,256",
        metavar="N,N,...",
        help="concurrent streams, one load level each (default: %(default)s)",
    )
    calibrate.add_argument(
        "--duration-s",
        type=float,
        default=8.0,
        metavar="S",
        help="measured seconds per level, after a warm-up of min(1, S/4) s (default: %(default)s)",
    )
    calibrate.add_argument(
        "--ttft-s",
        type=float,
        default=0.05,
        metavar="S",
        help="the synthetic target's time to first token, seconds (default: %(default)s)",
    )
    calibrate.add_argument(
        "--itl-s",
        type=float,
        default=0.01,
        metavar="S",
        help="the synthetic target's gap between tokens, seconds (default: %(default)s)",
    )
    calibrate.add_argument(
        "--output-tokens",
        type=int,
        default=64,
        metavar="N",
        help="output tokens per request (default: %(default)s)",
    )
    calibrate.add_argument(
        "--workers",
        default="auto",
        metavar="N|auto",
        help="load worker processes; auto: one per 128 streams, up to the cores "
        "(default: %(default)s)",
    )
    calibrate.add_argument(
        "--plant-send-delay-ms",
        type=float,
        default=0.0,
        metavar="MS",
        help="self-check: wait MS before every send, a delay of the client's own that the "
        "send side must show and the receive side must not (default: %(default)s)",
    )
    calibrate.set_defaults(handler=_calibrate)
