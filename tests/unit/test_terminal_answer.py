"""What a run prints (issue 40): the answer, then the status and the paths, last; each
level's detail only with --verbose; what the target lacks said once, not as tables.

Before, a synthetic run printed each level's 7-row latency table, its throughput and
counters lines, a per-level prefix-cache table of "not available" cells, and ended on
the percentile method; the status was at the top and no report path was given."""

from __future__ import annotations

import dataclasses
import io
import sys

import pytest

from moeperf.cli import main

pytestmark = pytest.mark.slow  # one real run: two 1.5 s levels on the synthetic target

# The harness's own limits relaxed: this checks what is printed, not the client, and the
# tests share the cores (a client-bound level would end the run invalid, exit 1).
SHORT = ["--set", "load.levels=[1,4]", "--set", "load.duration_s=1.5", "--set",
         "load.warmup_s=0.3", "--set", "export.live_metrics=false",
         "--set", "harness.max_loop_lag_p99_s=5.0",
         "--set", "harness.max_cpu_fraction=1.0"]  # fmt: skip
LATENCY_TABLE_HEAD = "p99 95% CI ms"  # the head of each level's full latency table


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """One real run with --report, and what it printed."""
    runs = tmp_path_factory.mktemp("runs")
    capture = pytest.MonkeyPatch()  # capsys is per test; the run is shared by the module
    out = io.StringIO()
    capture.setattr(sys, "stdout", out)
    try:
        code = main(["--runs-dir", str(runs), "run", "synthetic", *SHORT, "--report"])
    finally:
        capture.undo()
    (run,) = [p for p in runs.iterdir() if p.is_dir()]
    return code, out.getvalue(), runs, run


def test_a_run_ends_with_its_answer_status_and_paths(ran):
    code, printed, _, run = ran
    assert code == 0
    lines = [line for line in printed.splitlines() if line.strip()]
    assert lines[-3] == "status: complete"
    assert lines[-2] == f"run: {run}"
    assert lines[-1] == f"report: {run / 'report.html'}"
    assert (run / "report.html").exists()  # --report wrote it
    # The answer: one table of the levels, just above the status.
    assert "per load level (measured requests; ms)" in printed
    table = printed[printed.index("per load level") : printed.index("status: complete")]
    assert "c=1" in table and "c=4" in table and "TTFT p99" in table


def test_each_levels_detail_is_for_verbose(ran):
    _, printed, _, _ = ran
    assert LATENCY_TABLE_HEAD not in printed
    assert "c=1: output" not in printed  # the level's throughput line
    assert "percentiles: numpy" not in printed


def test_verbose_shows_every_level_then_the_same_ending(ran, capsys):
    _, printed, runs, run = ran
    capsys.readouterr()
    assert main(["--runs-dir", str(runs), "runs", "show", run.name, "--verbose"]) == 0
    verbose = capsys.readouterr().out
    assert verbose.count(LATENCY_TABLE_HEAD) == 2  # one per level
    assert "c=1: output" in verbose and "percentiles: numpy" in verbose
    assert "sampling (as sent)" in verbose  # what every request asked
    tail = [line for line in verbose.splitlines() if line.strip()][-3:]
    assert tail == [line for line in printed.splitlines() if line.strip()][-3:]


def test_what_the_target_lacks_is_one_line_not_a_table(ran):
    _, printed, _, _ = ran
    # The synthetic target has no prefix cache: no per-level table of "not available".
    assert "prefix cache per level" not in printed
    absent = "target counters (synthetic): MTP, KV cache, preemptions, prefix cache: not available"
    assert printed.count(absent) == 1
    assert "not available (404" not in printed


def test_runs_list_last_gives_the_newest_runs_report_paths(ran, capsys):
    _, _, runs, run = ran
    capsys.readouterr()
    assert main(["--runs-dir", str(runs), "runs", "list", "--last", "1"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[-1] == f"report: {run / 'report.html'}"


def test_a_request_audit_does_not_take_the_levels_tables_place(ran):
    # A Locust run's summary carries a request audit (its notes say it): before, the
    # audit counted as the run's own answer and the levels' table went to --verbose.
    from moeperf.collectors.request_audit import RequestAudit
    from moeperf.collectors.serving_records import ServingSummary
    from moeperf.collectors.store import RunStore
    from moeperf.reports.terminal.serving_lines import serving_lines

    _, _, runs, run = ran
    reader = RunStore(runs).open(run.name)
    summary = reader.summary()
    assert isinstance(summary, ServingSummary)
    audited = dataclasses.replace(summary, request_audit=RequestAudit(5, 5, 0, 0, 0))
    shown = serving_lines(audited, reader)
    titles = [str(item.title) for item in shown.answer if not isinstance(item, str)]
    assert titles == ["per load level (measured requests; ms)"]
    assert any(isinstance(i, str) and i.startswith("request audit: exact") for i in shown.detail)
