"""The ``moeperf`` CLI end to end: a real subprocess, the embedded synthetic target, a runs dir.

Usage errors must exit 2 before anything is sent; a short run must store a complete run
that ``runs list`` / ``runs show`` read back; SIGTERM must end a running run as aborted,
keep its records and stop every child process.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from child_processes import alive as _alive
from child_processes import children as _children
from child_processes import cmdline as _cmdline
from child_processes import survivors

from moeperf.collectors.serving_records import ServingSummary
from moeperf.collectors.store import RunStore

REPO_ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONIOENCODING": "utf-8"}
SHORT_RUN = [
    "--set",
    "load.levels=[2]",
    "--set",
    "load.duration_s=2",
    "--set",
    "load.warmup_s=0.5",
    "--set",
    "load.cooldown_s=0.2",
]


def moeperf(runs_dir: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "moeperf.cli", "--runs-dir", str(runs_dir), *args],
        cwd=REPO_ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def flat(text: str) -> str:
    """Output with rich's line wrapping undone."""
    return " ".join(text.split())


# --- usage errors: exit 2, nothing sent ------------------------------------------------


def test_a_typo_in_a_spec_field_names_it_and_suggests_the_right_one(tmp_path):
    spec = tmp_path / "typo.toml"
    spec.write_text('name = "typo"\n[load]\nlevles = [1]\n')
    runs = tmp_path / "runs"
    result = moeperf(runs, "run", str(spec))
    assert result.returncode == 2, result.stderr
    err = flat(result.stderr)
    assert "load.levles" in err
    assert "unknown field" in err
    assert "did you mean 'levels'?" in err
    assert "valid fields: mode, levels, duration_s" in err
    assert "Traceback" not in result.stderr
    assert not runs.exists(), "no run may start for an invalid spec"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["run", "default", "--set", "load.mode=closed"],
            ["load.mode", "'concurrency', 'poisson', 'gamma' or 'trace'", "(got 'closed')"],
        ),
        (["run", "default", "--set", "load.mode"], ["--set 'load.mode'", "expected KEY=VALUE"]),
        (
            ["run", "nosuchspec"],
            ["no spec file 'nosuchspec'", "shipped specs: accuracy, capacity, default"],
        ),
        (
            ["run", "default", "--set", "load.warmup_s=5", "--set", "load.duration_s=4"],
            ["load.warmup_s + load.cooldown_s must be less than load.duration_s"],
        ),
    ],
    ids=["bad-choice", "set-without-equals", "unknown-spec", "bad-window"],
)
def test_bad_input_exits_2_saying_what_is_valid(tmp_path, args, expected):
    runs = tmp_path / "runs"
    result = moeperf(runs, *args)
    assert result.returncode == 2, result.stderr
    err = flat(result.stderr)
    for text in expected:
        assert text in err
    assert "Traceback" not in result.stderr
    assert not runs.exists()


# --- a short run, then runs list / runs show ------------------------------------------


@pytest.fixture(scope="module")
def short_run(tmp_path_factory) -> tuple[Path, str, subprocess.CompletedProcess]:
    runs = tmp_path_factory.mktemp("cli") / "runs"
    result = moeperf(runs, "run", "synthetic", *SHORT_RUN, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    (run_id,) = RunStore(runs).run_ids()
    return runs, run_id, result


@pytest.mark.timing
@pytest.mark.slow
def test_a_short_run_completes_and_stores_everything(short_run):
    runs, run_id, result = short_run
    directory = runs / run_id
    assert f"-> {directory}" in result.stdout.replace("\n", "")
    reader = RunStore(runs).open(run_id)
    assert reader.manifest.status == "complete", reader.manifest.status_reason
    assert reader.manifest.target["kind"] == "synthetic"
    assert reader.manifest.spec_resolved["load"]["levels"] == [2.0]
    assert (directory / "requests.parquet").exists()
    assert not (directory / "requests.jsonl").exists()

    summary = json.loads((directory / "summary.json").read_text())
    assert list(summary["scenarios"]) == ["c=2"]
    scenario = summary["scenarios"]["c=2"]
    assert scenario["ok"] > 0
    assert scenario["errors"] == 0
    assert scenario["harness_error_s"]["matched_requests"] > 0
    assert scenario["client_bottleneck"] == []

    requests = reader.requests()
    assert set(requests["scenario"]) == {"c=2"}
    measured = requests[requests["phase"] == "measure"]
    assert (measured["status"] == "ok").sum() == scenario["ok"]
    assert (requests["status"] == "ok").all()


@pytest.mark.timing
@pytest.mark.slow
def test_runs_list_shows_the_run(short_run):
    runs, run_id, _ = short_run
    result = moeperf(runs, "runs", "list")
    assert result.returncode == 0, result.stderr
    line = next(line for line in result.stdout.splitlines() if run_id in line)
    assert "complete" in line


def _table_rows(text: str) -> dict[str, list[str]]:
    """Rows of a rich table printed to a pipe: first cell -> the other cells."""
    rows = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in re.split(r"[│┃|]", line)[1:-1]]
        if len(cells) > 1:
            rows[cells[0]] = cells[1:]
    return rows


@pytest.mark.timing
@pytest.mark.slow
def test_runs_show_latest_prints_percentiles_with_counts(short_run):
    runs, run_id, _ = short_run
    # Each level's percentile table with its counts is detail: --verbose.
    result = moeperf(runs, "runs", "show", "latest", "--verbose")
    assert result.returncode == 0, result.stderr
    assert run_id in result.stdout
    assert "status: complete" in result.stdout
    rows = _table_rows(result.stdout)
    assert rows["metric"][:2] == ["n", "p50 ms"]
    summary = RunStore(runs).open(run_id).summary()
    assert isinstance(summary, ServingSummary)
    latency = summary.scenarios["c=2"].latency_s
    for label, described in (("TTFT", latency.ttft_s), ("TPOT", latency.tpot_s),
                             ("ITL", latency.itl_s)):  # fmt: skip
        assert label in rows, result.stdout
        assert int(rows[label][0]) == described.count > 0
        assert float(rows[label][1]) > 0  # p50 in ms
    assert "c=2:" in result.stdout


def test_runs_show_an_unknown_run_exits_2(tmp_path):
    result = moeperf(tmp_path / "runs", "runs", "show", "nosuchrun")
    assert result.returncode == 2
    assert "no run 'nosuchrun'" in flat(result.stderr)
    assert "Traceback" not in result.stderr


# --- SIGTERM to a running run ------------------------------------------------------------


def _start(runs: Path, *overrides: str, log_dir: Path) -> subprocess.Popen:
    """``moeperf run synthetic --set O ...`` in the background, output to files in ``log_dir``."""
    args = [arg for override in overrides for arg in ("--set", override)]
    # The child has its own copies of the descriptors: ours can close at once.
    with open(log_dir / "stdout.txt", "w") as out, open(log_dir / "stderr.txt", "w") as err:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "moeperf.cli",
                "--runs-dir",
                str(runs),
                "run",
                "synthetic",
                *args,
            ],
            cwd=REPO_ROOT,
            env=ENV,
            stdout=out,
            stderr=err,
        )


def _wait_for(predicate, timeout_s: float, what: str, process: subprocess.Popen):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if process.poll() is not None:
            pytest.fail(f"moeperf exited ({process.returncode}) before {what}")
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout_s} s waiting for {what}")


def _jsonl_lines(runs: Path) -> int:
    total = 0
    for path in runs.glob("*/requests.jsonl"):
        with contextlib.suppress(FileNotFoundError):  # converted to parquet meanwhile
            total += path.read_bytes().count(b"\n")
    return total


def _target_children(pid: int) -> list[psutil.Process]:
    return [p for p in _children(pid) if "moeperf.targets.synthetic" in _cmdline(p)]


def _cleanup(process: subprocess.Popen, children: list[psutil.Process]) -> None:
    """Kill what this test started and is still there, by pid."""
    if process.poll() is None:
        process.kill()
        process.wait()
    for child in children:
        if _alive(child):
            child.kill()


def _assert_no_orphans(children: list[psutil.Process], grace_s: float = 5.0) -> None:
    left = survivors(children, grace_s)
    assert not left, f"child processes outlived moeperf: {left}"


def _assert_every_sent_request_recorded(requests) -> None:
    """Every request a worker sent has a record (ok, error or cancelled): ids w<i>-0..n-1."""
    for worker, group in requests.groupby("worker"):
        sequence = sorted(int(r.rsplit("-", 1)[1]) for r in group["request_id"])
        missing = sorted(set(range(sequence[-1] + 1)) - set(sequence))
        assert not missing, f"worker {worker}: {len(missing)} sent requests have no record"


def _dataset(tmp_path: Path) -> Path:
    path = tmp_path / "prompts.jsonl"
    lines = [json.dumps({"prompt": f"question {i}: " + "word " * 20}) for i in range(16)]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.slow
def test_sigterm_aborts_the_run_keeps_its_records_and_stops_the_target(tmp_path):
    runs = tmp_path / "runs"
    # A dataset workload without a tokenizer: no client-side counts to amend.
    process = _start(
        runs,
        "load.levels=[2]",
        "load.duration_s=30",
        "load.warmup_s=0",
        "workload.kind=dataset",
        f"workload.dataset_path={json.dumps(str(_dataset(tmp_path)))}",
        'workload.tokenizer=""',
        log_dir=tmp_path,
    )
    children: list[psutil.Process] = []
    try:
        _wait_for(lambda: _jsonl_lines(runs) >= 2, 60, "records in requests.jsonl", process)
        children = _children(process.pid)
        assert len(_target_children(process.pid)) == 1, [_cmdline(c) for c in children]
        process.send_signal(signal.SIGTERM)
        returncode = process.wait(timeout=20)
    finally:
        _cleanup(process, children)
    stdout = (tmp_path / "stdout.txt").read_text()
    stderr = (tmp_path / "stderr.txt").read_text()
    assert returncode == 130, stdout + stderr
    assert "Traceback" not in stderr, stderr
    assert "aborted by SIGTERM" in stderr

    reader = RunStore(runs).open("latest")
    assert reader.manifest.status == "aborted"
    assert reader.manifest.status_reason is not None
    assert "SIGTERM" in reader.manifest.status_reason
    assert (reader.directory / "requests.parquet").exists()
    requests = reader.requests()
    assert (requests["status"] == "ok").sum() >= 2
    # Requests in flight at the signal are kept, as cancelled.
    assert set(requests["status"]) <= {"ok", "cancelled"}
    _assert_every_sent_request_recorded(requests)
    assert reader.summary() is not None
    _assert_no_orphans(children)


@pytest.mark.timing
@pytest.mark.slow
def test_sigterm_keeps_every_request_that_was_sent(tmp_path):
    runs = tmp_path / "runs"
    # 64 streams of ~0.7 s requests: well over 50 records are pending when the signal comes.
    process = _start(
        runs,
        "load.levels=[64]",
        "load.duration_s=30",
        "load.warmup_s=0",
        "workload.num_prompts=32",
        log_dir=tmp_path,
    )
    children: list[psutil.Process] = []
    try:
        _wait_for(lambda: RunStore(runs).run_ids(), 60, "the run to start", process)
        time.sleep(4)
        children = _children(process.pid)
        process.send_signal(signal.SIGTERM)
        returncode = process.wait(timeout=30)
    finally:
        _cleanup(process, children)
    assert returncode == 130
    reader = RunStore(runs).open("latest")
    assert reader.manifest.status == "aborted"
    _assert_no_orphans(children)
    requests = reader.requests()
    assert len(requests) > 64
    _assert_every_sent_request_recorded(requests)


@pytest.mark.slow
def test_records_reach_disk_while_a_level_runs(tmp_path):
    runs = tmp_path / "runs"
    process = _start(
        runs,
        "load.levels=[2]",
        "load.duration_s=30",
        "load.warmup_s=0",
        "workload.num_prompts=8",
        log_dir=tmp_path,
    )
    children: list[psutil.Process] = []
    try:
        _wait_for(lambda: RunStore(runs).run_ids(), 60, "the run to start", process)
        _wait_for(lambda: _target_children(process.pid), 10, "the target", process)
        # Requests take ~0.7 s; give the workers time to start and finish several.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not _jsonl_lines(runs):
            time.sleep(0.1)
        on_disk = _jsonl_lines(runs)
        children = _children(process.pid)
        # A crash: no chance to drain or to end the run.
        process.kill()
        process.wait()
    finally:
        _cleanup(process, children)
    reader = RunStore(runs).open("latest")
    assert reader.manifest.status == "aborted"
    assert reader.manifest.status_reason is not None
    assert "killed" in reader.manifest.status_reason
    # Records may still have landed between the count and the kill.
    assert len(reader.requests()) >= on_disk
    assert on_disk > 0, "no record was on disk 5 s into a level"
