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
import math
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import psutil
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from rich.table import Table

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
SAMPLE_S = 0.05
MIB = 2**20

ProcessKind = Literal["worker", "target", "other"]


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


def classify_process(cmdline: Sequence[str]) -> ProcessKind:
    """A child of the harness, by its command line: a load worker (multiprocessing's
    spawn), the embedded target, or something else (the resource tracker; a process
    between fork and exec still shows its parent's command line)."""
    text = " ".join(cmdline)
    if "spawn_main" in text:
        return "worker"
    if "moeperf.targets.synthetic" in text or "moeperf.targets.serving" in text:
        return "target"
    return "other"


@dataclass
class MemoryPeaks:
    """The largest RSS seen, in bytes: the parent's, the sum over the load workers (at one
    sample) and the largest single worker's."""

    parent: int = 0
    workers: int = 0
    worker_max: int = 0
    samples: int = 0

    def add(self, parent: int, workers: Mapping[int, int]) -> None:
        self.parent = max(self.parent, parent)
        self.workers = max(self.workers, sum(workers.values()))
        self.worker_max = max(self.worker_max, max(workers.values(), default=0))
        self.samples += 1


class RssSampler:
    """Samples the RSS of this process and of its load workers on a thread."""

    def __init__(self, interval_s: float = SAMPLE_S) -> None:
        self.interval_s = interval_s
        self.peaks = MemoryPeaks()
        self._me = psutil.Process()
        self._kinds: dict[int, ProcessKind] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="rss-sampler", daemon=True)

    def sample(self) -> tuple[int, int]:
        """One sample, added to the peaks: (parent RSS, workers' RSS summed)."""
        parent = self._me.memory_info().rss
        workers: dict[int, int] = {}
        for child in self._me.children(recursive=True):
            try:
                kind = self._kinds.get(child.pid) or classify_process(child.cmdline())
                if kind != "other":  # "other" may still exec into a worker or the target
                    self._kinds[child.pid] = kind
                if kind == "worker":
                    workers[child.pid] = child.memory_info().rss
            except psutil.Error:  # it ended between the listing and the read
                continue
        with self._lock:
            self.peaks.add(parent, workers)
        return parent, sum(workers.values())

    def _watch(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def __enter__(self) -> RssSampler:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()


@dataclass(frozen=True)
class TargetCounts:
    """The synthetic target's own counters: requests finished by outcome, faults injected."""

    requests: Mapping[str, float] = field(default_factory=dict)
    faults: Mapping[str, float] = field(default_factory=dict)

    def minus(self, before: TargetCounts) -> TargetCounts:
        def delta(now: Mapping[str, float], then: Mapping[str, float]) -> dict[str, float]:
            return {k: v - then.get(k, 0.0) for k, v in now.items()}

        return TargetCounts(
            delta(self.requests, before.requests), delta(self.faults, before.faults)
        )


def target_counts(exposition: str) -> TargetCounts:
    """``synthetic_requests_total`` by status and ``synthetic_faults_total`` by fault."""
    requests: dict[str, float] = {}
    faults: dict[str, float] = {}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            if sample.name == "synthetic_requests_total":
                requests[sample.labels["status"]] = sample.value
            elif sample.name == "synthetic_faults_total":
                faults[sample.labels["fault"]] = sample.value
    return TargetCounts(requests, faults)


def _read_target(url: str) -> TargetCounts:
    with urllib.request.urlopen(url.rstrip("/") + "/metrics", timeout=10) as response:
        return target_counts(response.read().decode())


def per_thousand_mib(grown_bytes: float, requests: int) -> float:
    """MiB per 1,000 requests (nan without requests)."""
    return grown_bytes / MIB / requests * 1000 if requests else math.nan


@dataclass(frozen=True)
class CaseResult:
    """One run of the benchmark: what was sent and stored, the truth, the memory."""

    factor: int
    rate: float
    run_status: str
    level_status: str
    client_bound: tuple[str, ...]  # the harness's [harness] checks, whatever the status
    sent: int
    offered: int
    records: int
    record_ids: int
    ok: int
    errors: Mapping[str, int]
    cancelled: int
    target_ok: int
    injected_errors: int
    # The harness's own check (measured phase): ok requests matched to the target's
    # ground truth by response id, and those that could not be; None: not compared.
    ground_truth_matched: int | None
    ground_truth_unmatched: int | None
    parent_start: int  # RSS after imports
    parent_level_start: int  # RSS as the level starts (target up, prompts built)
    parent_level_end: int  # RSS once every record is in, before the summary is written
    parent_peak: int
    parent_hwm: int  # VmHWM: the true peak, between samples too
    workers_level_start: int
    workers_peak: int
    worker_max: int
    samples: int
    level_s: float
    wall_s: float

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    @property
    def records_exact(self) -> bool:
        """Every request the workers sent is stored, once, and ended one way."""
        return (
            self.records == self.record_ids == self.sent
            and self.ok + self.error_count + self.cancelled == self.records
        )

    @property
    def errors_exact(self) -> bool:
        """The errors are the faults the target injected (HTTP 500s, each one), and the
        oks are the requests it answered in full."""
        return (
            self.errors.get("http_5xx", 0) == self.error_count == self.injected_errors
            and self.ok == self.target_ok
        )

    @property
    def exact(self) -> bool:
        return self.records_exact and self.errors_exact

    @property
    def parent_growth(self) -> int:
        return self.parent_peak - self.parent_level_start

    @property
    def workers_growth(self) -> int:
        return self.workers_peak - self.workers_level_start


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
        self.before = _read_target(self.url)

    def level_started(self, scenario: str, duration_s: float) -> None:
        self.at_level_start = self.sampler.sample()
        self.level_started_s = time.perf_counter()

    def level_done(self, outcome: LevelOutcome) -> None:
        # Every record is in (the workers' last message is their level report): the
        # target is still up, and its counters are the level's whole truth.
        self.level_s = time.perf_counter() - self.level_started_s
        self.at_level_end = self.sampler.sample()
        self.after = _read_target(self.url).minus(self.before)


def _vm_hwm() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


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
        parent_hwm=_vm_hwm(),
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


def _ratio(high: float, low: float) -> str:
    return f"{high / low:.2f}" if low else "n/a"


def _matched(case: CaseResult) -> str:
    matched, unmatched = case.ground_truth_matched, case.ground_truth_unmatched
    if matched is None or unmatched is None:
        return "n/a"
    return f"{matched:,} of {matched + unmatched:,}"


def results_table(low: CaseResult, high: CaseResult) -> Table:
    """One row per measure, the two runs side by side and the stress run over the normal."""
    table = Table(title="the harness under stress: synthetic target, error_rate 0.5")
    table.add_column("")
    for column in (f"{low.factor}x", f"{high.factor}x", f"{high.factor}x / {low.factor}x"):
        table.add_column(column, justify="right")
    mib = MIB

    def row(
        name: str,
        of: Callable[[CaseResult], Any],
        text: Callable[[Any], str] = str,
        ratio: bool = True,
    ) -> None:
        a, b = of(low), of(high)
        table.add_row(name, text(a), text(b), _ratio(b, a) if ratio else "")

    row("rate (requests/s)", lambda c: c.rate, lambda v: f"{v:g}")
    row("requests sent", lambda c: c.sent, lambda v: f"{v:,}")
    row("records stored (ids)", lambda c: c.record_ids, lambda v: f"{v:,}")
    row("ok", lambda c: c.ok, lambda v: f"{v:,}", ratio=False)
    row("errors (http_5xx)", lambda c: c.error_count, lambda v: f"{v:,}", ratio=False)
    row("faults injected (target)", lambda c: c.injected_errors, lambda v: f"{v:,}", False)
    row("target's ok (ground truth)", lambda c: c.target_ok, lambda v: f"{v:,}", False)
    row("measured oks matched to ground truth", _matched, ratio=False)
    row("records exact", lambda c: "yes" if c.records_exact else "NO", ratio=False)
    row("errors = faults injected", lambda c: "yes" if c.errors_exact else "NO", ratio=False)
    row("parent RSS at level start (MiB)", lambda c: c.parent_level_start / mib, "{:.1f}".format)
    row("parent RSS at level end (MiB)", lambda c: c.parent_level_end / mib, "{:.1f}".format)
    row("parent RSS peak (MiB)", lambda c: c.parent_peak / mib, "{:.1f}".format)
    row("parent growth (MiB)", lambda c: c.parent_growth / mib, "{:.1f}".format)
    row("parent growth per 1k requests (MiB)",
        lambda c: per_thousand_mib(c.parent_growth, c.sent), "{:.2f}".format)  # fmt: skip
    row("workers RSS peak, sum (MiB)", lambda c: c.workers_peak / mib, "{:.1f}".format)
    row("workers growth (MiB)", lambda c: c.workers_growth / mib, "{:.1f}".format)
    row("workers growth per 1k requests (MiB)",
        lambda c: per_thousand_mib(c.workers_growth, c.sent), "{:.2f}".format)  # fmt: skip
    row("client-bound", lambda c: "yes" if c.client_bound else "no", ratio=False)
    row("level / run status", lambda c: f"{c.level_status} / {c.run_status}", ratio=False)
    row("level (s)", lambda c: c.level_s, "{:.1f}".format, ratio=False)
    row("wall (s)", lambda c: c.wall_s, "{:.1f}".format)
    return table


def marginal_bytes_per_request(low: CaseResult, high: CaseResult, measure: str) -> float:
    """The slope of an RSS measure (a ``CaseResult`` field: ``parent_peak``,
    ``workers_peak``...) over requests sent between two cases: what one more request
    costs, the fixed part left out."""
    grown = getattr(high, measure) - getattr(low, measure)
    return grown / (high.sent - low.sent) if high.sent != low.sent else math.nan


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
