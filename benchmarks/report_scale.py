"""How long and how much memory ``build_report`` takes on a run of 1,000,000 requests.

    python benchmarks/report_scale.py [--requests 1000000] [--runs-dir DIR] [--keep]

The requests are GENERATED (not measured): a closed-loop sweep over eight concurrency
levels with realistic shapes (lognormal prompt and output lengths, about 66 chunks per
request: a role-only chunk, ~64 token chunks of which some carry two tokens as with MTP,
a usage-only chunk; 0.3% errors and 0.1% cancelled). They are built column-wise with numpy
and pyarrow (list columns via ``ListArray.from_arrays``, never a Python list per request),
written as a RunStore-compatible run (manifest.json, requests.parquet and, as the runner
writes at the end of every run, summary.json; ``--no-summary`` leaves it out so that the
report computes it too), and the report is then built in a fresh process so that its
peak RSS is the report's own: load the run, ``build_report``, write the HTML.
Goals: under 15 s, under 2 GB peak RSS, HTML under 6 MB.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.parquet as pq

from moeperf.collectors.schema import SCHEMA_VERSION
from moeperf.collectors.store import RunStore
from moeperf.collectors.summary import summarize_requests
from moeperf.collectors.tables import REQUEST_SCHEMA, table_to_frame

MS = 1_000_000
LEVELS = (1, 2, 4, 8, 16, 32, 64, 128)
# build_report seconds, peak RSS of the process (MiB), HTML size (MiB).
GOALS = {"seconds": 15.0, "peak_rss_mb": 2048.0, "html_mb": 6.0}
ERROR_TYPES = ("http_5xx", "stall_timeout", "stream_truncated")


def _level_counts(n: int) -> np.ndarray:
    counts = np.full(len(LEVELS), n // len(LEVELS))
    counts[: n % len(LEVELS)] += 1
    return counts


def _level_table(
    rng: np.random.Generator, n: int, streams: int, first_id: int, t0_ns: int
) -> tuple[pa.Table, int]:
    """The records of one closed-loop level of ``n`` requests on ``streams`` streams."""
    prompt = np.clip(rng.lognormal(np.log(400), 0.6, n), 16, 8192).astype(np.int64)
    token_chunks = np.clip(rng.lognormal(np.log(56), 0.45, n), 2, 400).astype(np.int64)
    # Latencies grow with load: prefill at ~20k tokens/s plus queueing; decode slows down.
    ttft_ns = (
        (0.02 + prompt / 20_000.0) * (1 + streams / 32) * rng.lognormal(0, 0.25, n) * 1e9
    ).astype(np.int64)
    itl_s = 0.01 * (1 + streams / 64)
    lengths = token_chunks + 2  # role-only chunk first, usage-only chunk last
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    starts, ends = offsets[:-1], offsets[1:] - 1

    tokens = (rng.random(total, dtype=np.float32) < 0.3).astype(np.int64) + 1  # 30% MTP pairs
    tokens[starts] = 0
    tokens[ends] = 0
    # Gap before each chunk; per-request times are cumulative sums within each request.
    gaps = rng.gamma(4.0, 0.25, total).astype(np.float32)
    gaps *= np.float32(itl_s * 1e9)
    gaps *= tokens
    gaps[starts] = 0
    gaps[ends] = 100_000  # usage chunk 0.1 ms after the last token
    times = np.cumsum(gaps, dtype=np.float64)
    del gaps
    times -= np.repeat(times[starts], lengths)
    # Relative to the first token chunk (index 1), then shifted by TTFT below.
    times -= np.repeat(times[starts + 1], lengths)
    chunk_ns = times.astype(np.int64)
    del times
    chunk_ns[starts] = -200_000  # the role chunk arrives 0.2 ms before the first token
    last_rel = chunk_ns[ends - 1]
    out_tokens = np.add.reduceat(tokens, starts)

    queue_ns = rng.exponential(0.2 * MS, n).astype(np.int64)
    e2e_ns = queue_ns + ttft_ns + last_rel + 500_000  # done 0.5 ms after the last token
    # Closed loop: each stream sends its next request when the previous one is done
    # (rows are stream after stream, not in time order; nothing reads them in order).
    per_stream = -(-n // streams)
    grid = np.zeros(per_stream * streams, dtype=np.int64)
    grid[:n] = e2e_ns
    ends_in_stream = np.cumsum(grid.reshape(streams, per_stream), axis=1)
    intended = (ends_in_stream - grid.reshape(streams, per_stream)).ravel()[:n] + t0_ns
    send = intended + queue_ns
    first = send + ttft_ns
    chunk_ns += np.repeat(first, lengths)
    last = first + last_rel
    done = intended + e2e_ns
    level_end = int(done.max())

    status = np.full(n, "ok", dtype=object)
    roll = rng.random(n)
    failed = roll < 0.003
    cancelled = (roll >= 0.003) & (roll < 0.004)
    status[failed] = "error"
    status[cancelled] = "cancelled"
    error_type = np.full(n, None, dtype=object)
    error_type[failed] = np.asarray(ERROR_TYPES, dtype=object)[
        rng.integers(0, len(ERROR_TYPES), int(failed.sum()))
    ]
    error_message = np.full(n, None, dtype=object)
    error_message[failed] = "generated error (bench_report)"
    http_status = np.where(error_type == "http_5xx", 503, 200)
    good = ~(failed | cancelled)

    position = (intended - t0_ns) / max(level_end - t0_ns, 1)
    phase = np.where(position < 0.05, "warmup", np.where(position > 0.98, "cooldown", "measure"))
    values_ns = pa.array(chunk_ns)
    del chunk_ns
    list_offsets = pa.array(offsets, pa.int32())  # a list array's offsets are int32
    columns = {
        "request_id": pa.array([f"r{i:07d}" for i in range(first_id, first_id + n)]),
        "scenario": pa.array(np.full(n, f"c={streams}", dtype=object), pa.string()),
        "phase": pa.array(phase.astype(object), pa.string()),
        "worker": pa.array(np.zeros(n, dtype=np.int64)),
        "intended_send_ns": pa.array(intended),
        "send_ns": pa.array(send),
        "done_ns": pa.array(done),
        "status": pa.array(status, pa.string()),
        "chunk_ns": pa.ListArray.from_arrays(list_offsets, values_ns),
        "chunk_tokens": pa.ListArray.from_arrays(list_offsets, pa.array(tokens)),
        "chunk_tokens_source": pa.array(np.full(n, "usage_stats", dtype=object), pa.string()),
        "first_token_ns": pa.array(first, mask=~good),
        "last_token_ns": pa.array(last, mask=~good),
        "prompt_tokens": pa.array(prompt),
        "output_tokens": pa.array(out_tokens, mask=~good),
        "client_prompt_tokens": pa.nulls(n, pa.int64()),
        "client_output_tokens": pa.nulls(n, pa.int64()),
        "error_type": pa.array(error_type, pa.string()),
        "error_message": pa.array(error_message, pa.string()),
        "http_status": pa.array(http_status),
        "server_request_id": pa.nulls(n, pa.string()),
        "stream_end": pa.array(np.full(n, "done", dtype=object), pa.string(), mask=~good),
        "conversation": pa.nulls(n, pa.string()),
        "turn": pa.nulls(n, pa.int64()),
        "cached_prompt_tokens": pa.nulls(n, pa.int64()),
        "schema_version": pa.array(np.full(n, SCHEMA_VERSION, dtype=np.int64)),
    }
    return pa.table(columns, schema=REQUEST_SCHEMA), level_end


def synthetic_requests(n: int, seed: int = 0) -> pa.Table:
    """``n`` generated request records as an Arrow table of the stored requests schema."""
    rng = np.random.default_rng(seed)
    tables, t0, first = [], 0, 0
    for streams, count in zip(LEVELS, _level_counts(n), strict=True):
        if count == 0:
            continue
        table, level_end = _level_table(rng, int(count), streams, first, t0)
        tables.append(table)
        first += int(count)
        t0 = level_end + 300 * MS  # the next level starts 0.3 s later, as the runner's do
    return pa.concat_tables(tables)


def write_run(store: RunStore, table: pa.Table, *, summary: bool = True) -> str:
    """Store ``table`` as a complete serving run and return its id; with ``summary``,
    also its summary.json, computed by collectors as the runner does at a run's end."""
    writer = store.create(
        "serving",
        spec_given={"name": "bench-report", "description": "generated records"},
        target={"kind": "generated", "model": "none", "simulated": True},
    )
    writer.add_note(
        f"GENERATED records ({table.num_rows:,} requests) made by benchmarks/report_scale.py to "
        "time the report; nothing here was measured."
    )
    table = table.replace_schema_metadata({"moeperf_schema_version": str(SCHEMA_VERSION)})
    pq.write_table(table, writer.directory / "requests.parquet")
    if summary:
        writer.write_summary(summarize_requests(table_to_frame("requests", table)))
    writer.complete()
    return writer.run_id


class _PeakRss:
    """The largest RSS seen while the block runs (sampled every 10 ms by a thread)."""

    def __enter__(self) -> _PeakRss:
        self.peak = psutil.Process().memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def _watch(self) -> None:
        process = psutil.Process()
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, process.memory_info().rss)

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _vm_hwm_kib() -> float:
    """This process's peak resident set (VmHWM, KiB): its own address space only."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return float(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # not Linux: best effort


def measure(runs_dir: str, run_id: str, out: str) -> dict[str, float]:
    """Load the run, build its report and write it; runs in a fresh process."""
    from moeperf.reports.report import build_report
    from moeperf.reports.runs import load_run

    started = time.perf_counter()
    run = load_run(RunStore(runs_dir), run_id)
    loaded = time.perf_counter()
    before = psutil.Process().memory_info().rss
    with _PeakRss() as during:
        html = build_report([run], title="bench_report: generated records")
    built = time.perf_counter()
    Path(out).write_text(html, encoding="utf-8")
    mb = 2**20
    return {
        "load_s": loaded - started,
        "seconds": built - loaded,
        # The whole process, loading included. Not ru_maxrss: Linux carries the forking
        # parent's high-water mark (the generator's) across exec into the child's.
        "peak_rss_mb": _vm_hwm_kib() / 1024,
        "rss_loaded_mb": before / mb,
        "build_peak_mb": during.peak / mb,
        "html_mb": len(html.encode("utf-8")) / mb,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--runs-dir", default=None, help="keep the generated run here")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--no-summary",
        action="store_true",
        help="store no summary.json, so the report computes it (the worst case)",
    )
    parser.add_argument(
        "--measure", nargs=3, metavar=("RUNS_DIR", "RUN_ID", "OUT"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(*args.measure)))
        return 0

    runs_dir = args.runs_dir or tempfile.mkdtemp(prefix="moeperf-bench-report-")
    try:
        started = time.perf_counter()
        table = synthetic_requests(args.requests, args.seed)
        run_id = write_run(RunStore(runs_dir), table, summary=not args.no_summary)
        chunk_lists = table.column("chunk_ns").combine_chunks()
        assert isinstance(chunk_lists, pa.ListArray)  # the stored schema's list<int64>
        chunks = chunk_lists.values
        print(
            f"generated {table.num_rows:,} request records ({len(chunks):,} chunks) in "
            f"{time.perf_counter() - started:.1f} s -> {runs_dir}/{run_id} "
            "(GENERATED, not measured)"
        )
        del table, chunk_lists, chunks
        out = str(Path(runs_dir) / run_id / "report.html")
        result = subprocess.run(
            [
                sys.executable,
                __file__,
                "--measure",
                runs_dir,
                run_id,
                out,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            print(result.stdout + result.stderr, file=sys.stderr)
            return 1
        numbers = json.loads(result.stdout.strip().splitlines()[-1])
        print(_table(args.requests, numbers))
        failed = [k for k, goal in GOALS.items() if numbers[k] > goal]
        print("goals met" if not failed else f"over goal: {', '.join(failed)}")
        if args.runs_dir:
            print(f"report: {out}")
        return 0 if not failed else 1
    finally:
        if not args.runs_dir:
            shutil.rmtree(runs_dir, ignore_errors=True)


def _table(records: int, n: dict[str, float]) -> str:
    header = (
        "| records | load_run s | build_report s | RSS after load MB | peak RSS in "
        "build_report MB | peak RSS MB (process) | HTML MB |"
    )
    rule = "|---:|---:|---:|---:|---:|---:|---:|"
    row = (
        f"| {records:,} | {n['load_s']:.1f} | {n['seconds']:.1f} | {n['rss_loaded_mb']:.0f} | "
        f"{n['build_peak_mb']:.0f} | {n['peak_rss_mb']:.0f} | {n['html_mb']:.2f} |"
    )
    goals = (
        f"| goal | | < {GOALS['seconds']:.0f} | | | < {GOALS['peak_rss_mb']:.0f} | "
        f"< {GOALS['html_mb']:.0f} |"
    )
    return "\n".join((header, rule, row, goals))


if __name__ == "__main__":
    sys.exit(main())
