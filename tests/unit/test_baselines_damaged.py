"""Damaged baselines are detected and named, with what to do: a ``baseline.json``
truncated, overwritten, not UTF-8, of an unknown schema version or with a field of the
wrong type, and a record file of a version truncated, are each a clear error (exit 2 from
the CLI) naming the file, never a traceback. Damage is done to a baseline promoted from a
real (small) run, as it would happen to the committed files."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from run_factory import store_run

from moeperf.cli import main
from moeperf.collectors.records import RequestRecord
from moeperf.collectors.store import RunWriter
from moeperf.reports.baselines import BASELINE_FILE, BaselineStore, BaselineVersion
from moeperf.reports.errors import BaselineCorruptError

MS = 1_000_000
RESTORE = "restore the version from git (git restore "


def records(n: int = 20) -> list[RequestRecord]:
    out = []
    for i in range(n):
        start = i * 40 * MS
        chunks = [start + (20 + k * 5) * MS for k in range(4)]
        out.append(RequestRecord(
            request_id=f"r{i}", scenario="c=1", phase="measure", worker=0,
            intended_send_ns=start, send_ns=start + 1000, done_ns=chunks[-1] + MS,
            status="ok", chunk_ns=chunks, chunk_tokens=[1, 1, 1, 1],
            first_token_ns=chunks[0], last_token_ns=chunks[-1], prompt_tokens=16,
            output_tokens=4,
        ))  # fmt: skip
    return out


def write_run(runs: Path, end: Callable[[RunWriter], None] = RunWriter.complete) -> RunWriter:
    target = {"kind": "synthetic"}
    return store_run(
        runs, records(), spec_given={"name": "t"}, target=target, summary="computed", end=end
    )


@pytest.fixture
def baseline(tmp_path: Path) -> BaselineVersion:
    run = write_run(tmp_path / "runs")
    return BaselineStore(tmp_path / "baselines").promote(run.directory, "b")


def writable(path: Path) -> Path:
    os.chmod(path, 0o644)
    return path


def cli(tmp_path: Path, *args: str) -> int:
    where = ["--baselines-dir", str(tmp_path / "baselines")]
    return main(["--runs-dir", str(tmp_path / "runs"), *args, *where])


def error_of(capsys) -> str:
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return " ".join(captured.err.split())


def edit_meta(path: Path, **changes: object) -> None:
    meta = json.loads(path.read_text())
    path.write_text(json.dumps({**meta, **changes}))


COMMANDS = [["baseline", "list"], ["baseline", "show", "b"], ["baseline", "report", "b"]]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[1])
def test_a_truncated_baseline_json_is_named_with_what_to_do(tmp_path, capsys, baseline, command):
    path = writable(baseline.path / BASELINE_FILE)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    assert cli(tmp_path, *command) == 2
    err = error_of(capsys)
    assert f"baseline b@1: {path} is not valid JSON" in err
    assert "truncated or overwritten" in err
    assert f"{RESTORE}{baseline.path})" in err


def test_a_baseline_json_overwritten_with_other_text_is_named(tmp_path, capsys, baseline):
    path = writable(baseline.path / BASELINE_FILE)
    path.write_text("<html><body>502 Bad Gateway</body></html>\n")
    assert cli(tmp_path, "baseline", "show", "b") == 2
    err = error_of(capsys)
    assert f"{path} is not valid JSON (Expecting value at line 1 column 1)" in err
    assert RESTORE in err


def test_a_baseline_json_that_is_not_utf8_is_named(tmp_path, capsys, baseline):
    path = writable(baseline.path / BASELINE_FILE)
    data = path.read_bytes()
    at = data.index(b'"created": "') + len(b'"created": "')
    path.write_bytes(data[:at] + b"\xe9" + data[at + 1 :])  # a Latin-1 byte in a string
    assert cli(tmp_path, "baseline", "list") == 2
    err = error_of(capsys)
    assert f"{path} is not UTF-8 text (invalid continuation byte at byte {at})" in err
    assert RESTORE in err


def test_a_baseline_json_of_binary_garbage_is_named(tmp_path, capsys, baseline):
    path = writable(baseline.path / BASELINE_FILE)
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    assert cli(tmp_path, "baseline", "show", "b") == 2
    err = error_of(capsys)
    assert f"{path} is not UTF-8 text (invalid start byte at byte 0)" in err


@pytest.mark.parametrize(
    ("found", "advice"),
    [
        (2, "it was written by a newer moeperf: upgrade moeperf"),
        ("1.0", "promote the run again (moeperf baseline promote RUN --name NAME)"),
    ],
)
def test_an_unknown_schema_version_is_refused_with_advice(
    tmp_path, capsys, baseline, found, advice
):
    path = writable(baseline.path / BASELINE_FILE)
    edit_meta(path, schema_version=found)
    assert cli(tmp_path, "baseline", "show", "b") == 2
    err = error_of(capsys)
    assert f"{path}: schema_version {found!r} is not supported (this moeperf reads 0, 1)" in err
    assert advice in err


@pytest.mark.parametrize(
    ("field", "value"), [("created", None), ("source_run_id", 7), ("version", True)]
)
def test_a_field_of_the_wrong_type_is_named(tmp_path, capsys, baseline, field, value):
    # `baseline list` printed the created date with rich: a traceback on null before.
    path = writable(baseline.path / BASELINE_FILE)
    edit_meta(path, **{field: value})
    assert cli(tmp_path, "baseline", "list") == 2
    err = error_of(capsys)
    assert f"{path} has a field {field!r} of the wrong type: {value!r}" in err
    assert RESTORE in err


def test_a_baseline_json_nested_past_the_recursion_limit_is_named(tmp_path, capsys, baseline):
    # json.loads raised RecursionError (a traceback) before.
    path = writable(baseline.path / BASELINE_FILE)
    path.write_text("[" * 100_000 + "]" * 100_000)
    assert cli(tmp_path, "baseline", "list") == 2
    assert f"{path} is not a baseline's JSON (RecursionError)" in error_of(capsys)


@pytest.mark.parametrize("file", ["requests.parquet", "summary.json", "manifest.json"])
def test_a_truncated_record_file_of_a_version_is_named(tmp_path, capsys, baseline, file):
    path = writable(baseline.path / file)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    assert cli(tmp_path, "baseline", "show", "b") == 2
    err = error_of(capsys)
    assert f"baseline b@1 ({baseline.path}): {file} does not match its recorded sha256" in err
    assert "truncated, overwritten or edited" in err and RESTORE in err


def test_the_gate_names_a_damaged_baseline(tmp_path, capsys, baseline):
    path = writable(baseline.path / BASELINE_FILE)
    path.write_bytes(path.read_bytes()[:10])
    assert cli(tmp_path, "gate", baseline.source_run_id, "--baseline", "b") == 2
    assert f"{path} is not valid JSON" in error_of(capsys)


def test_one_damaged_version_does_not_break_the_others(tmp_path, baseline):
    store = BaselineStore(tmp_path / "baselines")
    second = store.promote(tmp_path / "runs" / baseline.source_run_id, "b")
    writable(baseline.path / BASELINE_FILE).write_text("{")
    assert store.get("b", 2).content_hash == second.content_hash
    with pytest.raises(BaselineCorruptError, match="b@1"):
        store.get("b", 1)


def test_a_run_killed_after_its_parquet_was_written_can_be_promoted(tmp_path):
    # Killed between writing requests.parquet and removing requests.jsonl (collectors.store
    # writes the parquet aside, renames it, then removes the JSONL): both are there, the
    # parquet whole. Before, promote refused it as "keeps records only in requests.jsonl".
    runs = tmp_path / "runs"
    saved = tmp_path / "requests.jsonl"

    def killed_late(run: RunWriter) -> None:
        shutil.copyfile(run.directory / "requests.jsonl", saved)
        run.abort("process 1234 ended without closing the run (killed?)")
        shutil.copyfile(saved, run.directory / "requests.jsonl")

    run = write_run(runs, killed_late)
    assert (run.directory / "requests.parquet").exists()
    baseline = BaselineStore(tmp_path / "baselines").promote(run.directory, "b", force=True)
    assert "requests.parquet" in baseline.files
    assert "requests.jsonl" not in baseline.files
    assert len(BaselineStore(tmp_path / "baselines").load_run_data("b").requests) == 20
