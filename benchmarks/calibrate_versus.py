"""The harness's own error, this checkout beside another commit, in one sitting: ``moeperf
calibrate`` at 1, 16, 64 and 128 streams run by each in turn (ABAB...), and per level the
total TTFT error p50 / p99 (the client's TTFT minus the synthetic target's
received-to-first-write: docs/concepts/calibration.md), its send and receive sides, the
E2E total, whether the level was valid, and the CPU seconds of each whole calibration
(every process it started).

The other commit runs from a ``git worktree`` of it, with its own code and its own
synthetic target. A commit from before the send side was counted (17d7ae0) has no total:
"-" there.

    python benchmarks/calibrate_versus.py [--base HEAD~1] [--rounds 3]   (tox -e bench-calibrate)
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from moeperf.collectors.serving_records import ServingSummary
from moeperf.collectors.store import RunStore

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class LevelFigures:
    """One level of one calibration, in ms; None where the commit did not measure it."""

    total_p50_ms: float | None
    total_p99_ms: float | None
    send_p50_ms: float | None
    receive_p50_ms: float | None
    e2e_total_p50_ms: float | None
    valid: bool


@dataclass(frozen=True)
class Calibration:
    levels: dict[str, LevelFigures]
    cpu_s: float
    wall_s: float


def _ms(value: float | None) -> float | None:
    return None if value is None else value * 1e3


def _calibrate(code_dir: Path, runs: Path, levels: str, duration_s: float) -> Calibration:
    """One ``moeperf calibrate`` with the code in ``code_dir``; its figures from its run."""
    env = {**os.environ, "PYTHONPATH": str(code_dir)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "moeperf", "--runs-dir", str(runs), "calibrate",
         "--levels", levels, "--duration-s", str(duration_s)],
        cwd=code_dir, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    wall_s = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode not in (0, 1):  # 1: a level client-bound, which is a figure here
        raise SystemExit(f"calibrate in {code_dir} exited {done.returncode}:\n{done.stderr}")
    summary = RunStore(runs).open("latest").summary()
    if not isinstance(summary, ServingSummary):
        raise SystemExit(f"calibrate in {code_dir} wrote no serving summary:\n{done.stdout}")
    figures = {}
    for scenario, entry in summary.scenarios.items():
        errors = entry.harness_error_s
        if errors is None:
            continue
        figures[scenario] = LevelFigures(
            total_p50_ms=_ms(errors.ttft_total.value_at(0.5)),
            total_p99_ms=_ms(errors.ttft_total.value_at(0.99)),
            send_p50_ms=_ms(errors.send.value_at(0.5)),
            receive_p50_ms=_ms(errors.ttft.value_at(0.5)),
            e2e_total_p50_ms=_ms(errors.e2e_total.value_at(0.5)),
            valid=entry.status == "ok",
        )
    return Calibration(figures, cpu_s, wall_s)


def _median(values: list[float | None]) -> str:
    known = [v for v in values if v is not None]
    return f"{statistics.median(known):+.2f}" if known else "-"


def _worktree(base: str, into: Path) -> Path:
    path = into / "base"
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", "--quiet", str(path), base],
        check=True,
    )
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="HEAD~1", help="the commit to compare with")
    parser.add_argument("--rounds", type=int, default=3, help="calibrations of each")
    parser.add_argument("--levels", default="1,16,64,128")
    parser.add_argument("--duration-s", type=float, default=8.0)
    args = parser.parse_args()
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    results: dict[str, list[Calibration]] = defaultdict(list)
    with tempfile.TemporaryDirectory(prefix="calibrate-versus-") as tmp:
        root = Path(tmp)
        base_dir = _worktree(args.base, root)
        try:
            for round_ in range(args.rounds):
                # Alternate which goes first, so neither always runs on a warmer host.
                order = [("base", base_dir), ("head", REPO)]
                for name, code in order if round_ % 2 == 0 else order[::-1]:
                    results[name].append(
                        _calibrate(code, root / name, args.levels, args.duration_s)
                    )
                    print(f"round {round_ + 1}/{args.rounds}: {name} done", file=sys.stderr)
        finally:
            subprocess.run(
                ["git", "-C", str(REPO), "worktree", "remove", "--force", str(base_dir)],
                check=False,
            )
    labels = {"head": f"this checkout ({head})", "base": f"base ({args.base})"}
    print(
        f"moeperf calibrate, {args.rounds} runs each, interleaved, {args.duration_s:g} s per "
        "level: medians over the runs of each level's p50 / p99 error, ms (signed)"
    )
    header = "| commit | level | TTFT total p50 | TTFT total p99 | send p50 | receive p50 | "
    print(header + "E2E total p50 | valid runs |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for name in ("base", "head"):
        runs = results[name]
        for level in runs[0].levels:
            rows = [r.levels[level] for r in runs if level in r.levels]
            print(
                f"| {labels[name]} | {level} | {_median([r.total_p50_ms for r in rows])} | "
                f"{_median([r.total_p99_ms for r in rows])} | "
                f"{_median([r.send_p50_ms for r in rows])} | "
                f"{_median([r.receive_p50_ms for r in rows])} | "
                f"{_median([r.e2e_total_p50_ms for r in rows])} | "
                f"{sum(r.valid for r in rows)}/{len(rows)} |"
            )
    print()
    print("| commit | CPU s per calibration (each run) | wall s |")
    print("|---|---|---:|")
    for name in ("base", "head"):
        runs = results[name]
        cpu = ", ".join(f"{r.cpu_s:.1f}" for r in runs)
        print(f"| {labels[name]} | {cpu} | {statistics.median(r.wall_s for r in runs):.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
