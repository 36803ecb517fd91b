"""Damaged run files are detected and named: a manifest, summary, parquet or JSONL file
truncated, overwritten with other bytes, or not UTF-8 is a ``CorruptRunFileError`` (exit 2)
naming the file, not a traceback; one damaged run does not hide the others from
``runs list``. (A truncated *last* JSONL line is a crash mid-write, read past:
tests/unit/test_store.py.)"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from moeperf.cli import main
from moeperf.collectors.errors import CorruptRunFileError
from moeperf.collectors.records import RequestRecord
from moeperf.collectors.serving_records import ServingSummary, empty_scenario
from moeperf.collectors.store import RunStore, RunWriter


def finished_run(store: RunStore) -> RunWriter:
    run = store.create("serving", spec_given={"name": "t"}, target={"kind": "synthetic"})
    for i in range(3):
        run.append_request(RequestRecord(
            request_id=f"r{i}", scenario="c=1", phase="measure", worker=0,
            intended_send_ns=i, send_ns=i + 1, done_ns=i + 2, status="ok",
        ))  # fmt: skip
    run.write_summary(ServingSummary(scenarios={"c=1": empty_scenario()}))
    run.complete()
    return run


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])


def garbage(path: Path) -> None:
    path.write_bytes(b"\x89\xff not what it was \x00\x01")


def rename_a_column(path: Path) -> None:
    table = pq.read_table(path)
    names = ["st4tus" if n == "status" else n for n in table.column_names]
    renamed = table.rename_columns(names).replace_schema_metadata(table.schema.metadata)
    pq.write_table(renamed, path)


READS: dict[str, Callable[[RunStore, str], object]] = {
    "manifest.json": lambda store, run: store.open(run),
    "summary.json": lambda store, run: store.open(run).summary(),
    "requests.parquet": lambda store, run: store.open(run).requests(),
}


@pytest.mark.parametrize("name", sorted(READS))
@pytest.mark.parametrize("damage", [truncate, garbage], ids=["truncated", "garbage"])
def test_a_damaged_file_is_named(tmp_path, name, damage):
    store = RunStore(tmp_path / "runs")
    run = finished_run(store)
    damage(run.directory / name)
    with pytest.raises(CorruptRunFileError, match=f"{name}: .*the file is damaged"):
        READS[name](store, run.run_id)


def test_a_parquet_file_missing_a_column_is_named(tmp_path):
    store = RunStore(tmp_path / "runs")
    run = finished_run(store)
    rename_a_column(run.directory / "requests.parquet")
    with pytest.raises(CorruptRunFileError, match=r"requests\.parquet: .*status are missing"):
        store.open(run.run_id).requests()


def test_a_jsonl_line_that_is_not_utf8_is_named(tmp_path):
    store = RunStore(tmp_path / "runs")
    run = store.create("serving")
    path = run.directory / "server_metrics.jsonl"
    path.write_bytes(b'{"schema_version": 1}\n\xff\xfe\n{"schema_version": 1}\n')
    with pytest.raises(Exception, match=r"server_metrics\.jsonl:2: not valid JSON"):
        store.open(run.run_id).server_metrics()


def test_runs_list_shows_the_others_and_names_the_damaged_one(tmp_path, capsys):
    store = RunStore(tmp_path / "runs")
    good, bad = finished_run(store), finished_run(store)
    garbage(bad.directory / "manifest.json")
    manifests, problems = store.scan()
    assert [m.run_id for m in manifests] == [good.run_id]
    assert len(problems) == 1 and bad.run_id in str(problems[0])
    assert main(["--runs-dir", str(tmp_path / "runs"), "runs", "list"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert good.run_id in out and "skipped a run that cannot be read" in out


def test_a_report_of_a_damaged_run_exits_2_naming_the_file(tmp_path, capsys):
    store = RunStore(tmp_path / "runs")
    run = finished_run(store)
    (run.directory / "summary.json").write_text(json.dumps({"schema_version": 2})[:-3])
    assert main(["--runs-dir", str(tmp_path / "runs"), "report", run.run_id]) == 2
    err = capsys.readouterr().err
    assert "summary.json" in err and "Traceback" not in err


def test_the_arrow_error_is_not_what_the_user_sees(tmp_path):
    store = RunStore(tmp_path / "runs")
    run = finished_run(store)
    garbage(run.directory / "requests.parquet")
    with pytest.raises(CorruptRunFileError) as caught:
        store.open(run.run_id).requests()
    assert not isinstance(caught.value, pa.ArrowException)


@pytest.mark.parametrize(
    ("found", "advice"),
    [
        (3, "it was written by a newer moeperf: upgrade moeperf (pip install -U moeperf)"),
        ("2", "it is not a moeperf file or was written by an unreleased version: re-run it"),
    ],
)
@pytest.mark.parametrize("command", [["runs", "show"], ["report"]], ids=" ".join)
def test_a_summary_of_an_unknown_schema_version_is_refused_with_advice(
    tmp_path, capsys, found, advice, command
):
    store = RunStore(tmp_path / "runs")
    run = finished_run(store)
    path = run.directory / "summary.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "schema_version": found}))
    assert main(["--runs-dir", str(tmp_path / "runs"), *command, run.run_id]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "Traceback" not in err
    supported = "(this moeperf reads 1, 2)"
    assert f"{path}: schema_version {found!r} is not supported {supported}; {advice}" in err
    assert not (run.directory / "report.html").exists()


def test_runs_list_shows_the_others_beside_a_run_of_a_newer_moeperf(tmp_path, capsys):
    # One run written by a newer moeperf made `runs list` exit 2 and show nothing before.
    store = RunStore(tmp_path / "runs")
    good, newer = finished_run(store), finished_run(store)
    path = newer.directory / "manifest.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "schema_version": 2}))
    assert main(["--runs-dir", str(tmp_path / "runs"), "runs", "list"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert good.run_id in out
    assert f"{path}: schema_version 2 is not supported" in out
    assert "upgrade moeperf" in out


def test_a_damaged_middle_jsonl_line_is_a_usage_error_naming_the_file(tmp_path, capsys):
    store = RunStore(tmp_path / "runs")
    run = store.create("serving")
    path = run.directory / "requests.jsonl"
    record = finished_run(store).directory / "requests.parquet"
    line = pq.read_table(record).slice(0, 1).to_pylist()[0]
    whole = json.dumps({**line, "schema_version": 1}) + "\n"
    path.write_text(whole + whole[: len(whole) // 2] + "\n" + whole.replace("r0", "r1"))
    with pytest.raises(CorruptRunFileError, match=r"requests\.jsonl:2: not valid JSON"):
        store.open(run.run_id).requests()
    assert main(["--runs-dir", str(tmp_path / "runs"), "report", run.run_id]) == 2
    assert "restore it from a copy" in " ".join(capsys.readouterr().err.split())
