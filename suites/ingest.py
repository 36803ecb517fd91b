"""Ingest a pytest-benchmark JSON file as a run of suite "micro".

pytest-benchmark's ``--benchmark-json=PATH`` file holds, per benchmark, ``stats.data``:
one entry per round, the round's time divided by its iterations (seconds per call). That
list is always written to the ``--benchmark-json`` file; the files that
``--benchmark-save`` / ``--benchmark-autosave`` keep under ``.benchmarks/`` have it only
with ``--benchmark-save-data``. Each round becomes one ``SampleRecord``, so the gate
compares the distributions of round times, not pytest-benchmark's own summary numbers.

A file is checked whole before any run is created: bad input leaves no run behind.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from moeperf.collectors.micro_summary import MicroSummary, summarize_rounds
from moeperf.collectors.records import SampleRecord
from moeperf.collectors.store import RunStore
from moeperf.suites.errors import UsageError

SUITE = "micro"
DEFAULT_NAME = "micro"
# What one sample is, stated in the summary so nobody has to guess.
SAMPLE_MEANING = (
    "one sample per round: the round's wall time divided by its iterations "
    "(seconds per call, pytest-benchmark's stats.data)"
)
_HINT = "produce one with: pytest BENCHMARKS --benchmark-json=PATH"


@dataclass(frozen=True, slots=True)
class Benchmark:
    """One benchmark of a pytest-benchmark file: its name and every round's time."""

    fullname: str
    group: str
    rounds: list[float]
    iterations: int
    options: dict[str, Any]
    params: dict[str, Any] | None
    extra_info: dict[str, Any]


@dataclass(frozen=True, slots=True)
class BenchmarkFile:
    path: Path
    version: str
    datetime: str
    machine_info: dict[str, Any]
    commit_info: dict[str, Any]
    benchmarks: list[Benchmark]


def read_benchmark_json(json_path: str | Path) -> BenchmarkFile:
    """Read and check a pytest-benchmark JSON file; any problem is a ``UsageError``."""
    path = Path(json_path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file ({_HINT})") from None
    except IsADirectoryError:
        raise UsageError(f"{path}: is a directory, not a pytest-benchmark JSON file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot be read: {exc}") from None
    if not text.strip():
        # --benchmark-json opens (and empties) its file before any benchmark runs.
        raise UsageError(
            f"{path}: is empty; pytest-benchmark writes it only when benchmarks ran "
            "(were they all skipped, failed, or run with --benchmark-disable?)"
        )
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}: not JSON ({exc}); {_HINT}") from None
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise UsageError(f"{path}: not a pytest-benchmark file (no 'benchmarks' list); {_HINT}")
    if not data["benchmarks"]:
        raise UsageError(f"{path}: holds no benchmarks")
    benchmarks = [_benchmark(path, i, entry) for i, entry in enumerate(data["benchmarks"])]
    seen: set[str] = set()
    for b in benchmarks:
        if b.fullname in seen:
            raise UsageError(f"{path}: benchmark {b.fullname!r} appears twice")
        seen.add(b.fullname)
    return BenchmarkFile(
        path=path,
        version=str(data.get("version", "")),
        datetime=str(data.get("datetime", "")),
        machine_info=_mapping(data.get("machine_info")),
        commit_info=_mapping(data.get("commit_info")),
        benchmarks=benchmarks,
    )


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _benchmark(path: Path, index: int, entry: Any) -> Benchmark:
    where = f"{path}: benchmarks[{index}]"
    if not isinstance(entry, dict):
        raise UsageError(f"{where}: not an object; not a pytest-benchmark file? {_HINT}")
    fullname = entry.get("fullname") or entry.get("name")
    stats = entry.get("stats")
    if not isinstance(fullname, str) or not fullname or not isinstance(stats, dict):
        raise UsageError(
            f"{where}: no 'fullname' and 'stats'; not a pytest-benchmark file? {_HINT}"
        )
    where = f"{path}: benchmark {fullname!r}"
    data = stats.get("data")
    if data is None:
        raise UsageError(
            f"{where} has no per-round times (stats.data): files kept by --benchmark-save or "
            "--benchmark-autosave have them only with --benchmark-save-data; "
            "--benchmark-json files always do"
        )
    if not isinstance(data, list) or not data:
        raise UsageError(f"{where} has no rounds (stats.data is empty)")
    rounds = []
    for value in data:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok or not math.isfinite(value) or value < 0:
            raise UsageError(f"{where}: round time {value!r} is not a finite number >= 0")
        rounds.append(float(value))
    iterations = stats.get("iterations", 1)
    return Benchmark(
        fullname=fullname,
        group=str(entry.get("group") or ""),
        rounds=rounds,
        iterations=iterations if isinstance(iterations, int) else 1,
        options=_mapping(entry.get("options")),
        params=entry.get("params") if isinstance(entry.get("params"), dict) else None,
        extra_info=_mapping(entry.get("extra_info")),
    )


def summarize(benchmarks: list[Benchmark]) -> MicroSummary:
    """Per benchmark: count, mean, median, p90, p99 (with CIs), min and max, in seconds."""
    return MicroSummary(
        sample=SAMPLE_MEANING,
        benchmarks={
            b.fullname: summarize_rounds(b.rounds, b.group, b.iterations) for b in benchmarks
        },
    )


def ingest_benchmark(json_path: str | Path, store: RunStore, name: str | None = None) -> str:
    """Store a pytest-benchmark JSON file as a complete "micro" run; return its run id.

    One ``SampleRecord`` per round (metric: the benchmark's fullname, scenario: its
    group), a summary per benchmark, and the file's machine and commit info in the
    manifest's target. Raises ``UsageError`` for a file that cannot be ingested.
    """
    source = read_benchmark_json(json_path)
    name = name or DEFAULT_NAME
    spec_given = {"suite": SUITE, "name": name, "source": str(source.path)}
    spec_resolved = {
        **spec_given,
        "pytest_benchmark_version": source.version,
        "benchmarked_at": source.datetime,
        "benchmarks": {
            b.fullname: {
                "group": b.group,
                "rounds": len(b.rounds),
                "iterations": b.iterations,
                "options": b.options,
                "params": b.params,
                "extra_info": b.extra_info,
            }
            for b in source.benchmarks
        },
    }
    target = {
        "kind": "micro-benchmark",
        "tool": f"pytest-benchmark {source.version}".strip(),
        "machine_info": source.machine_info,
        "commit_info": source.commit_info,
    }
    with store.create(
        SUITE, spec_given=spec_given, spec_resolved=spec_resolved, target=target
    ) as run:
        for b in source.benchmarks:
            for value in b.rounds:
                run.append_sample(SampleRecord(b.fullname, value, "s", "lower", b.group))
        run.write_summary(summarize(source.benchmarks))
        run.add_note(f"ingested from {source.path}; {SAMPLE_MEANING}")
    return run.run_id


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3f} {unit}"
    return f"{seconds / 1e-9:.1f} ns"


def ingest_command(
    json_path: str,
    runs_dir: str,
    name: str | None = None,
    out: Callable[[str], Any] = print,
) -> int:
    """`moeperf ingest-benchmark JSON [--name NAME]`: 0 when stored.

    Bad input raises ``UsageError`` (the CLI prints it and exits 2); no run is created.
    """
    store = RunStore(runs_dir)
    run_id = ingest_benchmark(json_path, store, name)
    summary = store.open(run_id).summary()
    entries = summary.benchmarks if isinstance(summary, MicroSummary) else {}
    width = max((len(k) for k in entries), default=9)
    out(f"ingested {len(entries)} benchmarks from {json_path} as run {run_id}")
    out(f"{'benchmark':<{width}}  {'rounds':>7}  {'median':>12}  {'p90':>12}")
    for fullname, entry in entries.items():
        out(
            f"{fullname:<{width}}  {entry.rounds.count:>7}  {_duration(entry.median):>12}  "
            f"{_duration(entry.p90):>12}"
        )
    out(f"run: {store.root / run_id}")
    return 0
