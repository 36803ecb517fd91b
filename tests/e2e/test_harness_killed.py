"""The harness killed outright (``kill -9``) in the middle of a level of a real run.

Nothing in moeperf gets a chance to run: no signal handler, no ``finally``, no exit hook.
What must hold then: every record already flushed reads back; the next ``moeperf runs
list`` shows the run as aborted with the reason; its report says so and shows what was
measured; the embedded target, the load workers and the forkserver they were forked from
do not outlive the harness (the workers watch their parent sentinel,
suites/serving/load/orphan.py; the target for being re-parented); and the debris of a
kill that hit a write (a last JSONL line cut in the middle, a partial
``requests.parquet.tmp`` of the end-of-run conversion, a partial ``manifest.json.tmp``) is
read past, not fatal.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from child_processes import alive as _alive
from child_processes import cmdline as _cmdline
from child_processes import survivors
from cli_process import ENV, REPO_ROOT, moeperf

from moeperf.collectors.store import RunStore

# One level of two streams, long enough to be killed in the middle of it.
OVERRIDES = [
    "load.levels=[2]",
    "load.duration_s=30",
    "load.warmup_s=0",
    "load.cooldown_s=0.2",
    "workload.num_prompts=8",
]
# How long the children of a killed harness may take to notice and exit: the target checks
# for its parent every 0.5 s, the workers at once; the rest is a busy host's slack.
EXIT_GRACE_S = 20.0


def flat(text: str) -> str:
    return " ".join(text.split())


def complete_lines(path: Path) -> list[bytes]:
    """The lines of a JSONL file that were written whole (newline included)."""
    data = path.read_bytes()
    return data[: data.rfind(b"\n") + 1].splitlines()


def request_ids(lines: list[bytes]) -> set[str]:
    return {json.loads(line)["request_id"] for line in lines}


def page_text(path: Path) -> str:
    """The visible text of an HTML page (scripts and styles dropped), whitespace collapsed."""
    page = path.read_text(encoding="utf-8")
    page = re.sub(r"<(script|style)\b.*?</\1>", " ", page, flags=re.S)
    return flat(html.unescape(re.sub(r"<[^>]+>", " ", page)))


@dataclass(frozen=True)
class KilledRun:
    runs: Path
    run_id: str
    pid: int
    lines_at_kill: int  # complete lines in requests.jsonl just before the kill
    children: list[str]  # "pid: command line" of every child process before the kill
    survivors: list[str]  # those still running EXIT_GRACE_S after the kill


@pytest.fixture(scope="module")
def killed(tmp_path_factory) -> KilledRun:
    base = tmp_path_factory.mktemp("killed")
    runs = base / "runs"
    sets = [arg for override in OVERRIDES for arg in ("--set", override)]
    command = [sys.executable, "-m", "moeperf.cli", "--runs-dir", str(runs), "run", "synthetic"]
    with open(base / "stdout.txt", "w") as out, open(base / "stderr.txt", "w") as err:
        process = subprocess.Popen(
            [*command, *sets],
            cwd=REPO_ROOT,
            env=ENV,
            stdout=out,
            stderr=err,
        )
    children: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 120
        while True:
            found = list(runs.glob("*/requests.jsonl"))
            if found and len(complete_lines(found[0])) >= 3:
                break
            if process.poll() is not None:
                log = (base / "stderr.txt").read_text()
                pytest.fail(f"moeperf exited ({process.returncode}) before any record:\n{log}")
            if time.monotonic() > deadline:
                pytest.fail("no records in requests.jsonl 120 s after the start")
            time.sleep(0.05)
        jsonl = found[0]
        children = psutil.Process(process.pid).children(recursive=True)
        described = [f"{c.pid}: {_cmdline(c)}" for c in children]
        lines_at_kill = len(complete_lines(jsonl))
        # The real failure: the harness alone, with no chance to clean up.
        process.kill()
        process.wait(timeout=30)
        left = survivors(children, EXIT_GRACE_S)
    finally:
        # Whatever this test started and is still there, by pid.
        if process.poll() is None:
            process.kill()
            process.wait()
        for child in children:
            if _alive(child):
                child.kill()
    return KilledRun(
        runs=runs,
        run_id=jsonl.parent.name,
        pid=process.pid,
        lines_at_kill=lines_at_kill,
        children=described,
        survivors=left,
    )


@pytest.mark.slow
def test_the_target_and_the_load_workers_do_not_outlive_the_harness(killed):
    # All were there to be left behind: the target, the forkserver and the workers it
    # forked (a forked child keeps its server's command line).
    assert any("targets.synthetic" in c for c in killed.children), killed.children
    forkserver = [c for c in killed.children if "multiprocessing.forkserver" in c]
    assert len(forkserver) >= 2, killed.children
    assert not killed.survivors, f"outlived the killed harness: {killed.survivors}"


@pytest.mark.slow
def test_runs_list_shows_the_run_as_aborted_with_the_reason(killed):
    result = moeperf(killed.runs, "runs", "list")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    row = next(line for line in result.stdout.splitlines() if killed.run_id in line)
    assert "aborted" in row
    reason = f"process {killed.pid} ended without closing the run (killed?)"
    assert reason in flat(result.stdout)
    assert "damaged" not in result.stdout


@pytest.mark.slow
def test_every_flushed_record_reads_back(killed):
    reader = RunStore(killed.runs).open(killed.run_id)
    assert reader.manifest.status == "aborted"
    requests = reader.requests()
    # Records may have landed between the count and the kill: at least those counted.
    assert len(requests) >= killed.lines_at_kill >= 3
    # Exactly the records of the lines that made it to disk whole.
    on_disk = complete_lines(reader.directory / "requests.jsonl")
    assert set(requests["request_id"]) == request_ids(on_disk)
    assert (requests["status"] == "ok").sum() >= 1
    assert reader.summary() is None  # it died before writing one


@pytest.mark.slow
def test_the_report_says_aborted_and_shows_what_was_measured(killed):
    result = moeperf(killed.runs, "report", killed.run_id)
    assert result.returncode == 0, result.stderr
    page = Path(result.stdout.strip().splitlines()[-1])
    assert page.name == "report.html" and page.parent.name == killed.run_id
    text = page_text(page)
    assert f"status: aborted: process {killed.pid} ended without closing the run" in text
    # The per-level table counts the records that were flushed (the warm-up is 0 s).
    requests = RunStore(killed.runs).open(killed.run_id).requests()
    measured = requests[requests["phase"] == "measure"]
    ok = int((measured["status"] == "ok").sum())
    assert len(measured) >= 1
    assert f"c=2 {len(measured)} {ok} " in text, "per-level table of what was measured"


@pytest.mark.slow
def test_a_line_cut_by_the_kill_and_partial_tmp_files_are_not_fatal(killed, tmp_path):
    # A copy of the killed run, then the debris of a kill that hit writes: the last
    # record line cut in the middle, half a parquet file from the end-of-run conversion,
    # half a manifest from a manifest rewrite.
    runs = tmp_path / "runs"
    directory = runs / killed.run_id
    shutil.copytree(killed.runs / killed.run_id, directory)
    (directory / "report.html").unlink(missing_ok=True)  # written by the test above
    jsonl = directory / "requests.jsonl"
    whole = complete_lines(jsonl)
    last = whole[-1]
    jsonl.write_bytes(b"".join(line + b"\n" for line in whole[:-1]) + last[: len(last) // 2])
    frame = RunStore(killed.runs).open(killed.run_id).requests()
    full = directory / "full.parquet"
    pq.write_table(pa.Table.from_pandas(frame), full)
    (directory / "requests.parquet.tmp").write_bytes(full.read_bytes()[: full.stat().st_size // 2])
    full.unlink()
    manifest = (directory / "manifest.json").read_bytes()
    (directory / "manifest.json.tmp").write_bytes(manifest[: len(manifest) // 2])

    reader = RunStore(runs).open(killed.run_id)
    assert reader.manifest.status == "aborted"
    requests = reader.requests()
    # Every whole line, and nothing of the cut one or of the partial parquet.
    assert set(requests["request_id"]) == request_ids(whole[:-1])
    assert len(requests) == len(whole) - 1

    result = moeperf(runs, "runs", "list")
    assert result.returncode == 0, result.stderr
    row = next(line for line in result.stdout.splitlines() if killed.run_id in line)
    assert "aborted" in row
    assert "damaged" not in result.stdout and "warning" not in result.stdout
    assert "Traceback" not in result.stderr
    report = moeperf(runs, "report", killed.run_id)
    assert report.returncode == 0, report.stderr
    assert "status: aborted" in page_text(directory / "report.html")
