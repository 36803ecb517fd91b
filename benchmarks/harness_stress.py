"""Benchmark: the harness itself under stress, 10x a normal level's requests, half failing.

    python benchmarks/harness_stress.py [--rate 40] [--factor 10] [--duration-s 8]
                                           [--set KEY=VALUE ...]   (tox -e bench-stress)

Two real serving runs, through ``run_serving`` as ``moeperf run`` makes them (live export
and target scraping on, a runs directory in a temporary folder), against the embedded
synthetic target with ``error_rate = 0.5`` and fast latencies (TTFT 5 ms, 1 ms per token,
16 output tokens), so the target is not the limit: open loop (Poisson) at a normal rate and
at ``--factor`` times it, for the same duration. The normal rate, 40 requests/s, is about
what the nightly spec's top level sends on the 2-core development machine (32 streams:
~470 measured requests in its 10.5 s measured window, ~45/s). Both runs have two load
workers, so their memory compares like for like (``load.workers = "auto"`` would give the
normal rate one).

Each run goes in a fresh Python process (a case: ``--case FACTOR``), so that its memory is
its own, and reports: requests sent (the workers' count), records stored (read back with
``RunStore``, one per request id), ok and error, the target's own count of the faults it
injected (its /metrics, read before it stops: the ground truth), the harness's peak RSS
(the parent process, and the sum over the load worker processes, sampled by a thread every
50 ms; the target's process is not counted) and its growth from the level's start, and
the level's verdict (failed, client-bound) as the harness judged it. A table puts the two
side by side, with the ratio of the stress run to the normal one.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from harness_stress_memory import RssSampler, vm_hwm_bytes
from harness_stress_results import MIB, CaseResult, marginal_bytes_per_request, results_table
from harness_stress_target import TargetCounts, read_target
from rich.console import Console

from moeperf.collectors.serving_records import ServingSummary
from moeperf.collectors.store import RunStore, RunWriter
from moeperf.specs import validate_spec
from moeperf.suites.run_options import Progress
from moeperf.suites.serving.level_plan import LevelOutcome
from moeperf.suites.serving.load.validity import client_bottlenecks
from moeperf.suites.serving.runner import run_serving

NORMAL_RATE = 40.0  # requests/s (module doc: about the nightly's top level on this host)
FACTOR = 10
DURATION_S = 8.0
WORKERS = 2


def stress_spec(rate: float, duration_s: float, workers: int = WORKERS) -> dict[str, Any]:
    """A one-level Poisson run at ``rate`` requests/s against a target failing half."""
    return {
        "name": "harness-stress",
        "description": "the harness under stress: a target that fails half the requests",
        "target": {"kind": "synthetic", "api": "chat",
                   "synthetic": {"ttft_s": 0.005, "itl_s": 0.001, "error_rate": 0.5,
                                 "seed": 0}},
        "workload": {"kind": "random", "num_prompts": 128, "tokenizer": "server", "seed": 0,
                     "input_tokens": {"dist": "fixed", "mean": 64},
                     "output_tokens": {"dist": "fixed", "mean": 16}},
        "load": {"mode": "poisson", "levels": [rate], "duration_s": duration_s,
                 "warmup_s": 1.0, "cooldown_s": 0.5, "workers": workers, "seed": 0},
    }  # fmt: skip


class _Watch(Progress):
    """The runner's progress hooks: the target's counters before and after the level,
    and RSS as the level starts."""

    def __init__(self, sampler: RssSampler) -> None:
        self.sampler = sampler
        self.url = ""
        self.before = TargetCounts()
        self.after: TargetCounts | None = None
        self.at_level_start = (0, 0)
        self.at_level_end = (0, 0)
        self.level_started_s = 0.0
        self.level_s = 0.0

    def on_started(self, run: RunWriter) -> None:
        self.url = run.manifest.target["url"]
        self.before = read_target(self.url)

    def level_started(self, scenario: str, duration_s: float) -> None:
        self.at_level_start = self.sampler.sample()
        self.level_started_s = time.perf_counter()

    def level_done(self, outcome: LevelOutcome) -> None:
        # Every record is in (the workers' last message is their level report): the
        # target is still up, and its counters are the level's whole truth.
        self.level_s = time.perf_counter() - self.level_started_s
        self.at_level_end = self.sampler.sample()
        self.after = read_target(self.url).minus(self.before)


def run_case(factor: int, rate: float, duration_s: float, runs_dir: str,
             overrides: Sequence[str] = ()) -> CaseResult:  # fmt: skip
    """One stress run at ``factor`` x ``rate``, measured from this process."""
    loaded = validate_spec(stress_spec(rate * factor, duration_s), "harness-stress", overrides)
    spec = loaded.serving
    store = RunStore(runs_dir)
    with RssSampler() as sampler:
        start_rss = sampler.peaks.parent
        watch = _Watch(sampler)
        started = time.perf_counter()
        run_id = run_serving(spec, loaded.given, store, watch, watch.on_started)
        wall_s = time.perf_counter() - started
    run = store.open(run_id)
    frame = run.requests()
    summary = run.summary()
    assert isinstance(summary, ServingSummary) and watch.after is not None
    (scenario,) = summary.scenarios.values()
    reports = list(scenario.harness)
    harness = spec.harness
    bound = client_bottlenecks(
        reports,
        open_loop=True,
        capped=False,
        max_loop_lag_p99_s=harness.max_loop_lag_p99_s,
        max_cpu_fraction=harness.max_cpu_fraction,
        min_achieved_rate_ratio=harness.min_achieved_rate_ratio,
    )
    status = frame["status"]
    errors = Counter(frame.loc[status == "error", "error_type"].fillna("unknown"))
    truth = scenario.harness_error_s
    return CaseResult(
        factor=factor,
        rate=rate * factor,
        run_status=run.manifest.status,
        level_status=scenario.status,
        client_bound=tuple(bound),
        sent=sum(r.sent for r in reports),
        offered=sum(r.offered for r in reports),
        records=len(frame),
        record_ids=int(frame["request_id"].nunique()),
        ok=int((status == "ok").sum()),
        errors=dict(errors),
        cancelled=int((status == "cancelled").sum()),
        target_ok=round(watch.after.requests.get("ok", 0.0)),
        injected_errors=round(watch.after.faults.get("error", 0.0)),
        ground_truth_matched=truth.matched_requests if truth is not None else None,
        ground_truth_unmatched=truth.unmatched_requests if truth is not None else None,
        parent_start=start_rss,
        parent_level_start=watch.at_level_start[0],
        parent_level_end=watch.at_level_end[0],
        parent_peak=sampler.peaks.parent,
        parent_hwm=vm_hwm_bytes(),
        workers_level_start=watch.at_level_start[1],
        workers_peak=sampler.peaks.workers,
        worker_max=sampler.peaks.worker_max,
        samples=sampler.peaks.samples,
        level_s=watch.level_s,
        wall_s=wall_s,
    )


def _case_in_child(factor: int, args: argparse.Namespace, runs_dir: str) -> CaseResult:
    command = [sys.executable, "benchmarks/harness_stress.py", "--case", str(factor),
               "--rate", str(args.rate), "--duration-s", str(args.duration_s),
               "--runs-dir", runs_dir]  # fmt: skip
    for override in args.set:
        command += ["--set", override]
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=True)
    data = json.loads(done.stdout.strip().splitlines()[-1])
    data["client_bound"] = tuple(data["client_bound"])
    return CaseResult(**data)


def _mib(value: float) -> str:
    return f"{value / MIB:.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=NORMAL_RATE, help="normal requests/s")
    parser.add_argument("--factor", type=int, default=FACTOR, help="the stress run's multiple")
    parser.add_argument("--duration-s", type=float, default=DURATION_S)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a spec override for both runs (as moeperf run --set)")  # fmt: skip
    parser.add_argument("--runs-dir", help=argparse.SUPPRESS)
    parser.add_argument("--case", type=int, help=argparse.SUPPRESS)  # one run, JSON out
    args = parser.parse_args(argv)
    if args.case is not None:
        result = run_case(args.case, args.rate, args.duration_s, args.runs_dir, args.set)
        print(json.dumps(dataclasses.asdict(result)))
        return 0
    console = Console()
    cases = []
    with tempfile.TemporaryDirectory() as runs_dir:
        for factor in (1, args.factor):
            console.print(f"{factor}x: {args.rate * factor:g} requests/s for {args.duration_s:g} s")
            cases.append(_case_in_child(factor, args, runs_dir))
    low, high = cases
    console.print(results_table(low, high))
    for c in cases:
        for reason in c.client_bound:
            console.print(f"{c.factor}x client-bound: {reason}")
    slopes = {
        "parent at level end": "parent_level_end",
        "parent peak": "parent_peak",
        "workers peak": "workers_peak",
    }
    marginal = ", ".join(
        f"{name} {marginal_bytes_per_request(low, high, measure) / 1024:.1f} KiB"
        for name, measure in slopes.items()
    )
    console.print(f"marginal RSS per request ({low.factor}x -> {high.factor}x): {marginal}")
    console.print(
        f"parent VmHWM {_mib(low.parent_hwm)} / {_mib(high.parent_hwm)} MiB; largest worker "
        f"{_mib(low.worker_max)} / {_mib(high.worker_max)} MiB; RSS samples "
        f"{low.samples} / {high.samples}"
    )
    inexact = [c for c in cases if not c.exact]
    for c in inexact:
        console.print(f"[red]{c.factor}x: records not exact[/red]: {c}")
    return 1 if inexact else 0


if __name__ == "__main__":
    raise SystemExit(main())
