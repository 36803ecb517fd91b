"""Crash safety with real processes: a signal or a kill loses nothing already appended.

A child Python process appends records in a loop inside
``with store.create(...) as run, interrupts_end_runs():``; the test waits until some are
on disk, then signals it and reads the run back.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from moeperf.collectors.store import RunStore

REPO_ROOT = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent(
    """
    import sys, time
    from moeperf.collectors.records import RequestRecord, StepRecord
    from moeperf.collectors.store import RunStore, interrupts_end_runs

    store = RunStore(sys.argv[1])
    with store.create("crashtest") as run, interrupts_end_runs():
        print(run.directory, flush=True)
        i = 0
        while True:
            run.append_request(
                RequestRecord(
                    request_id=f"r{i}", scenario="c=1", phase="measure", worker=0,
                    intended_send_ns=i, send_ns=i + 1, done_ns=i + 2, status="ok",
                    chunk_ns=[i + 1, i + 2], chunk_tokens=[1, 1], output_tokens=2,
                )
            )
            run.append_step(StepRecord(step=i, rank=0, start_ns=i, end_ns=i + 1, tokens=8,
                                       tokens_per_expert=[[i, 1]]))
            i += 1
            time.sleep(0.005)
    """
)

_WAIT_S = 30.0


def _start_child(root: Path) -> tuple[subprocess.Popen, Path]:
    process = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(root)],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None  # stdout=PIPE
    line = process.stdout.readline().strip()
    if not line:
        process.kill()
        _, err = process.communicate(timeout=10)
        pytest.fail(f"child did not start a run: {err}")
    return process, Path(line)


def _jsonl_lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def _wait_for_records(directory: Path, at_least: int = 20) -> int:
    deadline = time.monotonic() + _WAIT_S
    while time.monotonic() < deadline:
        count = _jsonl_lines(directory / "requests.jsonl")
        if count >= at_least:
            return count
        time.sleep(0.02)
    pytest.fail(f"fewer than {at_least} records in {directory} after {_WAIT_S} s")


def _assert_contiguous(frame, column: str, at_least: int) -> None:
    values = [int(v) if column == "step" else int(v[1:]) for v in frame[column]]
    assert values == list(range(len(values))), "records lost or out of order"
    assert len(values) >= at_least


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_aborts_the_run_and_keeps_every_record(tmp_path, signum):
    process, directory = _start_child(tmp_path)
    try:
        seen = _wait_for_records(directory)
        process.send_signal(signum)
        _, err = process.communicate(timeout=_WAIT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    # The interruption propagated out of the block (after the run was ended).
    assert process.returncode != 0
    assert "RunInterrupted" in err, err

    reader = RunStore(tmp_path).open(directory.name)
    assert reader.manifest.status == "aborted"
    assert reader.manifest.status_reason == f"interrupted by {signum.name}"
    assert reader.manifest.ended_wall_time
    # Converted to parquet: one copy of the data, no JSONL left.
    for name in ("requests", "steps"):
        assert (directory / f"{name}.parquet").exists()
        assert not (directory / f"{name}.jsonl").exists()
    requests = reader.requests()
    _assert_contiguous(requests, "request_id", seen)
    steps = reader.steps()
    _assert_contiguous(steps, "step", seen - 1)
    # The request appended just before the signal may have no step after it; nothing more.
    assert len(requests) - len(steps) in (0, 1)
    assert [int(v) for v in requests["chunk_ns"].iloc[-1]] == [len(requests), len(requests) + 1]


@pytest.mark.slow
def test_a_killed_run_keeps_its_records_and_reads_back_as_aborted(tmp_path):
    process, directory = _start_child(tmp_path)
    try:
        seen = _wait_for_records(directory)
        assert RunStore(tmp_path).open(directory.name).manifest.status == "running"
        process.kill()
    finally:
        # Reaped, so the pid no longer exists (a zombie would still count as alive).
        process.communicate(timeout=_WAIT_S)
    assert process.returncode == -signal.SIGKILL

    reader = RunStore(tmp_path).open("latest")
    assert reader.run_id == directory.name
    assert reader.manifest.status == "aborted"
    assert reader.manifest.status_reason is not None
    assert str(process.pid) in reader.manifest.status_reason
    assert reader.manifest.ended_wall_time is None
    # Nothing was converted: the data is read from the JSONL, a torn last line skipped.
    assert (directory / "requests.jsonl").exists()
    assert not (directory / "requests.parquet").exists()
    requests = reader.requests()
    _assert_contiguous(requests, "request_id", seen)
    _assert_contiguous(reader.steps(), "step", seen - 1)
