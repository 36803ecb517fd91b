"""`moeperf compare` says which numbers do not stand, and when two runs share nothing.

Issue 40's trial: compare between an invalid run and a complete one never said that one
was invalid, and compare --force of unrelated runs printed 150 one-sided rows."""

from __future__ import annotations

from run_factory import END_REASONS, lognormal_requests, store_run

from moeperf.collectors.store import RunStore
from moeperf.reports.compare import compare_command


def test_each_runs_status_leads_and_marks_every_row_of_an_invalid_run(tmp_path):
    store = RunStore(tmp_path)
    requests = lognormal_requests(120, seed=1)
    complete = store_run(store, requests, summary="computed").run_id
    invalid = store_run(store, lognormal_requests(120, seed=2), summary="computed", end="invalid")
    lines: list[str] = []
    assert compare_command(complete, invalid.run_id, tmp_path, out=lines.append) == 0
    text = "\n".join(lines).splitlines()
    assert text[0] == f"A: {complete}  status=complete"
    assert text[1] == f"B: {invalid.run_id}  status=invalid ({END_REASONS['invalid']})"
    header = next(line for line in text if line.startswith("metric"))
    assert header.rstrip().endswith("not ok")
    rows = [line for line in text if line.startswith("c=1/")]
    assert rows and all(row.rstrip().endswith("B invalid") for row in rows), rows


def test_two_complete_runs_get_no_status_column(tmp_path):
    store = RunStore(tmp_path)
    a = store_run(store, lognormal_requests(120, seed=1), summary="computed").run_id
    b = store_run(store, lognormal_requests(120, seed=2), summary="computed").run_id
    lines: list[str] = []
    compare_command(a, b, tmp_path, out=lines.append)
    header = next(line for line in "\n".join(lines).splitlines() if line.startswith("metric"))
    assert "not ok" not in header


def test_runs_with_nothing_in_common_say_so_in_one_line(tmp_path):
    store = RunStore(tmp_path)
    a = store_run(store, lognormal_requests(120, seed=1, scenario="c=1"), summary="computed")
    b = store_run(store, lognormal_requests(120, seed=2, scenario="rate=5"), summary="computed")
    lines: list[str] = []
    assert compare_command(a.run_id, b.run_id, tmp_path, out=lines.append) == 0
    assert not any(line.startswith("metric") for line in lines)  # no one-sided table
    common = [line for line in lines if line.startswith("nothing in common")]
    assert len(common) == 1 and "A has " in common[0] and "B has " in common[0]
