"""The Locust engine end to end, on loopback against the synthetic ground-truth target:
a master and two local workers as separate processes; then a master that also waits for
a worker started on its own (as on another machine). The merged records are exactly the
requests the workers sent, and the figures agree with the asyncio engine's on the same
workload within what each engine's measured error allows."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from cli_process import ENV, REPO_ROOT, moeperf

from moeperf.collectors.serving_records import ServingSummary
from moeperf.collectors.store import RunReader, RunStore
from moeperf.suites.serving.locust_pool import free_port

# No jitter: both engines measure the same configured latencies. The client's own bounds
# are relaxed as in the other e2e tests on this shared 2-core host: this test compares
# engines, it does not judge them.
WORKLOAD = [
    "--set", "load.levels=[8]", "--set", "load.duration_s=6", "--set", "load.warmup_s=1",
    "--set", "target.synthetic.jitter=none", "--set", "target.synthetic.jitter_scale=0",
    "--set", "harness.max_loop_lag_p99_s=0.05", "--set", "harness.max_cpu_fraction=1",
]  # fmt: skip

pytestmark = pytest.mark.slow


def _summary(runs: Path) -> tuple[ServingSummary, RunReader]:
    store = RunStore(runs)
    (run_id,) = store.run_ids()
    reader = store.open(run_id)
    summary = reader.summary()
    assert isinstance(summary, ServingSummary)
    return summary, reader


def _p50_and_halfwidth(described) -> tuple[float, float]:
    estimate = described.at(0.5)
    assert estimate is not None and estimate.ci_low is not None and estimate.ci_high is not None
    return estimate.value, (estimate.ci_high - estimate.ci_low) / 2


@pytest.mark.timing
def test_two_local_workers_record_every_request_and_agree_with_asyncio(tmp_path):
    locust = moeperf(tmp_path / "locust", "run", "synthetic", "--engine", "locust",
                     "--workers", "2", *WORKLOAD)  # fmt: skip
    assert locust.returncode == 0, locust.stdout + locust.stderr
    assert "request audit: exact" in locust.stdout
    by_locust, reader = _summary(tmp_path / "locust")
    audit = by_locust.request_audit
    assert audit is not None and audit.exact and audit.sent > 0
    requests = reader.requests()
    assert audit.recorded == len(requests) == requests["request_id"].nunique() == audit.sent
    assert set(requests["worker"]) == {0, 1}  # both workers sent
    assert requests["request_id"].str.match(r"L[01]-\d+$").all()
    notes = " ".join(reader.manifest.notes)
    assert "Engine: Locust" in notes and "2 worker(s)" in notes
    assert reader.manifest.spec_resolved["load"]["engine"] == "locust"

    asyncio = moeperf(tmp_path / "asyncio", "run", "synthetic", *WORKLOAD)
    assert asyncio.returncode == 0, asyncio.stdout + asyncio.stderr
    by_asyncio, _ = _summary(tmp_path / "asyncio")
    assert by_asyncio.request_audit is None  # one process per worker, one host: no merge

    (level,) = by_locust.scenarios
    lo, asy = by_locust.scenarios[level], by_asyncio.scenarios[level]
    for engine in (lo, asy):
        assert engine.status == "ok"
        # Checked against the synthetic target's own write times (ground truth).
        assert engine.harness_error_s is not None
        assert engine.harness_error_s.unmatched_requests == 0
    # Each engine's error against the target's write times bounds how far its figures can
    # be from the truth: TTFT by its first-token error, TPOT (a difference of two chunk
    # times over the tokens between) by twice its chunk error.
    for metric, error, scale in (("ttft_s", "ttft", 1.0), ("tpot_s", "chunk", 2.0)):
        value_lo, half_lo = _p50_and_halfwidth(getattr(lo.latency_s, metric))
        value_asy, half_asy = _p50_and_halfwidth(getattr(asy.latency_s, metric))
        error_lo = getattr(lo.harness_error_s, error).value_at(0.99) or 0.0
        error_asy = getattr(asy.harness_error_s, error).value_at(0.99) or 0.0
        allowed = half_lo + half_asy + scale * (abs(error_lo) + abs(error_asy))
        assert abs(value_lo - value_asy) <= allowed, (metric, value_lo, value_asy, allowed)


def test_a_worker_started_apart_joins_the_master_and_its_records_merge(tmp_path):
    port = free_port()
    master = subprocess.Popen(
        [sys.executable, "-m", "moeperf.cli", "--runs-dir", str(tmp_path / "runs"), "run",
         "synthetic", "--engine", "locust", "--workers", "1", "--master",
         "--expect-workers", "1", "--master-port", str(port), *WORKLOAD],
        cwd=REPO_ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    time.sleep(3)  # the master is up (it waits for its workers: 120 s by default)
    worker = subprocess.Popen(
        [sys.executable, "-m", "moeperf.cli", "run", "--worker", "--master-host", "127.0.0.1",
         "--master-port", str(port)],
        cwd=REPO_ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        out, err = master.communicate(timeout=240)
        assert master.returncode == 0, out + err
        assert worker.wait(timeout=30) == 0  # it ends with its master
    finally:
        for process in (master, worker):
            if process.poll() is None:
                process.kill()
    assert "waiting for 1 remote worker" in err
    summary, reader = _summary(tmp_path / "runs")
    assert summary.request_audit is not None and summary.request_audit.exact
    requests = reader.requests()
    assert set(requests["worker"]) == {0, 1}
    assert len(requests) == summary.request_audit.sent


def test_the_web_ui_shows_ttft_tpot_and_e2e_while_the_run_goes_on(tmp_path):
    ui_port = free_port()
    run = subprocess.Popen(
        [sys.executable, "-m", "moeperf.cli", "--runs-dir", str(tmp_path / "runs"), "run",
         "synthetic", "--engine", "locust", "--workers", "1", "--ui",
         "--set", f"locust.ui_port={ui_port}", *WORKLOAD],
        cwd=REPO_ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    seen: dict[tuple[str, str], int] = {}
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and run.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/stats/requests") as page:
                    stats = json.load(page)["stats"]
            except OSError:
                time.sleep(0.5)  # not up yet, or between levels
                continue
            seen = {(s["method"], s["name"]): s["num_requests"] for s in stats if s["method"]}
            if all(seen.get((kind, "c=8"), 0) > 0 for kind in ("TTFT", "TPOT", "E2E")):
                break
            time.sleep(0.5)
        out, err = run.communicate(timeout=240)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, out + err
    for kind in ("TTFT", "TPOT", "E2E"):
        assert seen.get((kind, "c=8"), 0) > 0, seen
    assert f"web UI at http://127.0.0.1:{ui_port}" in " ".join(
        _summary(tmp_path / "runs")[1].manifest.notes
    )


# A level bounded by count alone (no duration_s): its window is only the 600 s safety limit.
COUNT_BOUND_SPEC = """
suite = "serving"
name = "locust-count-bound"
description = "one stream, bounded by its count, on two Locust workers"

[target]
kind = "synthetic"
api = "chat"

[target.synthetic]
ttft_s = 0.01
itl_s = 0.002
jitter = "none"

[workload]
kind = "random"
num_prompts = 16
tokenizer = "server"

[workload.input_tokens]
dist = "fixed"
mean = 32

[workload.output_tokens]
dist = "fixed"
mean = 4

[load]
levels = [1]
max_requests = 10
warmup_s = 0.0
"""


@pytest.mark.timeout(150)
def test_a_count_bound_level_ends_when_a_worker_has_no_users(tmp_path):
    # One stream on two workers: one of them gets no user, so no share of the level and no
    # summary to wait for (the master waited for one until its 60 s gave out).
    spec = tmp_path / "count-bound.toml"
    spec.write_text(COUNT_BOUND_SPEC)
    run = moeperf(tmp_path / "runs", "run", str(spec), "--engine", "locust", "--workers", "2",
                  "--set", "harness.max_loop_lag_p99_s=0.05", "--set",
                  "harness.max_cpu_fraction=1", timeout=120)  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    summary, reader = _summary(tmp_path / "runs")
    requests = reader.requests()
    assert len(requests) == requests["request_id"].nunique() == 10
    assert set(requests["status"]) == {"ok"}
    assert requests["worker"].nunique() == 1  # the one worker with the stream sent them all
    audit = summary.request_audit
    assert audit is not None and audit.exact and audit.sent == audit.recorded == 10
    # Only the worker that sent reports on the level: an idle one's watch of an empty
    # level (its CPU over a few ms of wall time) would judge nothing but noise.
    (entry,) = summary.scenarios.values()
    assert [(r.worker, r.sent) for r in entry.harness] == [(requests["worker"].iloc[0], 10)]
