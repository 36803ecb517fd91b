"""Baselines: promoted from real runs, versioned, immutable, verified on every read."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import os
import stat
from pathlib import Path

import pandas as pd
import pytest
from run_factory import End, end_run, store_run

from moeperf.collectors.records import RequestRecord, SampleRecord, StepRecord
from moeperf.collectors.serving_records import ServingSummary
from moeperf.collectors.store import RunReader, RunStore, RunWriter
from moeperf.collectors.summary import summarize_requests
from moeperf.collectors.tables import records_frame
from moeperf.reports.baseline_commands import list_command, promote_command, show_command
from moeperf.reports.baseline_migrations import (
    BASELINE_SCHEMA_VERSION,
    MIGRATIONS,
    content_hash,
    migrate,
)
from moeperf.reports.baseline_names import parse_ref
from moeperf.reports.baselines import BASELINE_FILE, BaselineStore
from moeperf.reports.errors import BaselineCorruptError, ReportUsageError
from moeperf.reports.runs import RunData, load_run

MS = 1_000_000
RECORDS = ("manifest.json", "summary.json", "requests.parquet", "steps.parquet", "samples.parquet")


def request(i: int, scenario: str, scale: float) -> RequestRecord:
    start = i * 50 * MS
    first = start + int((20 + i % 7) * scale * MS)
    chunks = [first + k * int(5 * scale * MS) for k in range(4)]
    return RequestRecord(
        request_id=f"{scenario}-{i}",
        scenario=scenario,
        phase="warmup" if i == 0 else "measure",
        worker=i % 2,
        intended_send_ns=start,
        send_ns=start + 1000,
        done_ns=chunks[-1] + MS,
        status="error" if i == 5 else "ok",
        chunk_ns=chunks,
        chunk_tokens=[1, 1, 2, 1],
        chunk_tokens_source="usage_stats",
        first_token_ns=chunks[0],
        last_token_ns=chunks[-1],
        prompt_tokens=64,
        output_tokens=5,
        client_output_tokens=5,
        error_type="http" if i == 5 else None,
        http_status=500 if i == 5 else 200,
    )


def write_run(runs: Path, scale: float = 1.0, end: End = "complete") -> RunWriter:
    """A small real serving run: two scenarios, a step, samples, a scrape and a summary."""
    records = [request(i, s, scale) for s in ("c=1", "c=4") for i in range(40)]
    step = StepRecord(step=0, rank=0, start_ns=0, end_ns=5 * MS, tokens=128)

    def ended(run: RunWriter) -> None:
        for value in (1.0, 1.1):
            run.append_sample(
                SampleRecord(metric="gemm", value=value * scale, unit="s", direction="lower")
            )
        run.append_server_metrics({"t_ns": 0, "metrics": {"x": 1}})
        run.write_summary(summarize_requests(records_frame(records)))
        end_run(run, end)

    return store_run(runs, records, steps=[step], spec_given={"scale": scale}, end=ended)


class Clock:
    """Promotion times one day apart, from a fixed date."""

    def __init__(self):
        self.t = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)

    def __call__(self) -> dt.datetime:
        self.t += dt.timedelta(days=1)
        return self.t


@pytest.fixture
def store(tmp_path: Path) -> BaselineStore:
    return BaselineStore(tmp_path / "baselines", now=Clock())


@pytest.fixture
def run(tmp_path: Path) -> RunWriter:
    return write_run(tmp_path / "runs")


def writable(path: Path) -> Path:
    os.chmod(path, 0o644)
    return path


def test_promote_copies_records_hashes_them_and_makes_them_read_only(store, run):
    baseline = store.promote(run.directory, "serving-cpu")
    assert (baseline.name, baseline.version, baseline.ref) == ("serving-cpu", 1, "serving-cpu@1")
    assert baseline.path == store.root / "serving-cpu" / "v1"
    assert sorted(p.name for p in baseline.path.iterdir()) == sorted([*RECORDS, BASELINE_FILE])
    assert not any(p.name.startswith(".") for p in baseline.path.parent.iterdir())
    meta = json.loads((baseline.path / BASELINE_FILE).read_text())
    assert meta["schema_version"] == BASELINE_SCHEMA_VERSION == 1
    assert (meta["name"], meta["version"], meta["source_run_id"]) == ("serving-cpu", 1, run.run_id)
    assert (meta["run_status"], meta["run_status_reason"], meta["suite"]) == (
        "complete",
        None,
        "serving",
    )
    assert meta["created"] == "2025-01-02T00:00:00.000+00:00"
    assert meta["host"] == run.manifest.host == baseline.host
    assert set(meta["files"]) == set(RECORDS)
    for name in RECORDS:  # byte-for-byte copies
        assert (baseline.path / name).read_bytes() == (run.directory / name).read_bytes()
    assert meta["content_hash"] == content_hash(meta["files"]) == baseline.content_hash
    lines = "".join(f"{n} {meta['files'][n]}\n" for n in sorted(RECORDS))
    assert content_hash(meta["files"]) == hashlib.sha256(lines.encode()).hexdigest()
    for path in baseline.path.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o444, path.name


def test_versions_increase_and_explicit_versions_only_go_up(store, run):
    assert [store.promote(run.directory, "b").version for _ in range(3)] == [1, 2, 3]
    assert store.promote(run.directory, "b", version=10).version == 10
    assert store.promote(RunReader(run.directory), "b").version == 11
    for version in (11, 10, 4, 1):
        with pytest.raises(ReportUsageError, match="versions only go up"):
            store.promote(run.directory, "b", version=version)
    with pytest.raises(ReportUsageError, match=">= 1"):
        store.promote(run.directory, "other", version=0)
    assert store.versions("b") == [1, 2, 3, 10, 11]


def test_an_existing_version_is_never_overwritten(store, tmp_path, run):
    first = store.promote(run.directory, "b", version=2)
    before = {p.name: p.read_bytes() for p in first.path.iterdir()}
    other = write_run(tmp_path / "runs", scale=3.0)
    with pytest.raises(ReportUsageError, match="never overwritten"):
        store.promote(other.directory, "b", version=2)
    assert {p.name: p.read_bytes() for p in first.path.iterdir()} == before
    assert store.get("b", 2).source_run_id == run.run_id


def test_a_failed_build_leaves_nothing_behind(store, run, monkeypatch):
    def refuse(*_args):
        raise OSError("disk full")

    monkeypatch.setattr(os, "rename", refuse)
    with pytest.raises(ReportUsageError):
        store.promote(run.directory, "b")
    monkeypatch.undo()
    assert list((store.root / "b").iterdir()) == []
    assert store.promote(run.directory, "b").version == 1


@pytest.mark.parametrize("name", ["Serving", "-x", ".x", "a/b", "", "..", "a b", "é"])
def test_names_follow_the_rule(store, run, name):
    with pytest.raises(ReportUsageError, match=r"\[a-z0-9\]\[a-z0-9._-\]\*"):
        store.promote(run.directory, name)


def test_parse_ref():
    assert parse_ref("serving-cpu@3") == ("serving-cpu", 3)
    assert parse_ref("serving-cpu@v3") == ("serving-cpu", 3)
    assert parse_ref("serving-cpu") == ("serving-cpu", None)
    assert parse_ref("serving-cpu@latest") == ("serving-cpu", None)
    for bad in ("serving@", "serving@x", "serving@1@2", "@3", "Serving@1", "serving@0"):
        with pytest.raises(ReportUsageError):
            parse_ref(bad)


def test_get_list_and_unknown_names(store, tmp_path, run):
    other = write_run(tmp_path / "runs", scale=2.0)
    store.promote(run.directory, "b")
    store.promote(other.directory, "b")
    store.promote(run.directory, "a.cpu_1")
    assert store.get("b").version == 2
    assert store.get("b").source_run_id == other.run_id
    assert store.get("b", 1).source_run_id == run.run_id
    listed = store.list()
    assert [(s.name, s.versions, s.latest) for s in listed] == [
        ("a.cpu_1", (1,), 1),
        ("b", (1, 2), 2),
    ]
    assert listed[1].created == "2025-01-03T00:00:00.000+00:00"
    assert listed[1].host_cpu == run.manifest.host["cpu_model"]
    with pytest.raises(ReportUsageError, match=r"no baseline 'c'.*a\.cpu_1, b"):
        store.get("c")
    with pytest.raises(ReportUsageError, match=r"no version 7 \(versions: 1, 2\)"):
        store.get("b", 7)
    with pytest.raises(ReportUsageError, match="no baseline 'c'"):
        store.trend("c")
    assert BaselineStore(tmp_path / "nowhere").list() == []


def test_commands(store, tmp_path, run):
    runs, root = str(tmp_path / "runs"), str(store.root)
    lines: list[str] = []
    assert list_command(root, out=lines.append) == 0
    assert "no baselines" in lines[-1]
    assert promote_command(run.run_id[:22], "cli", None, runs, root, False, out=lines.append) == 0
    assert "serving" in lines[-3] and "cli@1" in lines[-3]
    assert list_command(root, out=lines.append) == 0
    assert "cli" in lines[-1] and run.manifest.host["cpu_model"][:10] in lines[-1]
    lines.clear()
    assert show_command("cli@1", root, out=lines.append) == 0
    text = "\n".join(lines)
    summary = RunReader(run.directory).summary()
    assert isinstance(summary, ServingSummary)
    ttft = summary.scenarios["c=4"].latency_s.ttft_s
    p50 = ttft.value_at(0.5)
    assert p50 is not None
    assert "cli@1" in text and run.run_id in text and "c=1" in text and "c=4" in text
    assert f"{p50 * 1e3:.2f}" in text and f"n={ttft.count}" in text
    with pytest.raises(ReportUsageError, match="no run"):
        promote_command("nope", "cli", None, runs, root, False)
    with pytest.raises(ReportUsageError, match="no baseline"):
        show_command("missing", root)


def test_a_running_run_is_refused_even_with_force(store, tmp_path):
    run = write_run(tmp_path / "runs", end=None)
    with pytest.raises(ReportUsageError, match="has not ended"):
        store.promote(run.directory, "b", force=True)
    run.complete()
    assert store.promote(run.directory, "b").version == 1


@pytest.mark.parametrize("end", ["invalid", "aborted", "failed"])
def test_an_invalid_aborted_or_failed_run_needs_force_and_its_status_is_recorded(
    store, tmp_path, end
):
    run = write_run(tmp_path / "runs", end=end)
    with pytest.raises(ReportUsageError, match=f"ended {end}.*--force"):
        store.promote(run.directory, "b")
    with pytest.raises(ReportUsageError, match="--force"):
        promote_command(run.run_id, "b", None, str(tmp_path / "runs"), str(store.root), False)
    out: list[str] = []
    promote_command(
        run.run_id, "b", None, str(tmp_path / "runs"), str(store.root), True, out.append
    )
    baseline = store.get("b")
    assert baseline.run_status == end
    assert baseline.run_status_reason == run.manifest.status_reason
    assert run.manifest.status_reason is not None
    assert run.manifest.status_reason in out[0]


def test_a_run_kept_only_as_jsonl_is_refused(store, run):
    # Its parquet not written (the conversion failed, as its status reason says); a JSONL
    # beside a parquet is a run killed after writing it: test_baselines_damaged.py.
    (run.directory / "steps.parquet").unlink()
    (run.directory / "steps.jsonl").write_text("")
    with pytest.raises(ReportUsageError, match=r"steps\.jsonl"):
        store.promote(run.directory, "b")


def test_changed_byte_is_detected_and_named(store, run):
    baseline = store.promote(run.directory, "b")
    path = writable(baseline.path / "requests.parquet")
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(BaselineCorruptError, match=r"b@1.*requests\.parquet does not match"):
        store.get("b")
    with pytest.raises(BaselineCorruptError, match=r"requests\.parquet"):
        store.load_run_data("b", 1)


def test_missing_and_extra_files_are_detected_and_named(store, run):
    first = store.promote(run.directory, "b")
    second = store.promote(run.directory, "b")
    (first.path / "summary.json").unlink()
    with pytest.raises(BaselineCorruptError, match=r"b@1.*missing.*summary\.json"):
        store.get("b", 1)
    (second.path / "notes.txt").write_text("hello")
    with pytest.raises(BaselineCorruptError, match=r"b@2.*extra.*notes\.txt"):
        store.get("b")


def test_edited_baseline_json_is_detected(store, run):
    baseline = store.promote(run.directory, "b")
    path = writable(baseline.path / BASELINE_FILE)
    meta = json.loads(path.read_text())
    meta["files"]["steps.parquet"] = "0" * 64
    path.write_text(json.dumps(meta))
    with pytest.raises(BaselineCorruptError, match=r"steps\.parquet does not match"):
        store.get("b")
    path.unlink()
    with pytest.raises(BaselineCorruptError, match=r"baseline\.json is missing"):
        store.get("b")


def v0_document(meta: dict) -> dict:
    """The pre-release format 0 of a version's baseline.json (see baseline_migrations)."""
    return {
        "schema_version": 0,
        "name": meta["name"],
        "version": meta["version"],
        "created": meta["created"],
        "run_id": meta["source_run_id"],
        "status": meta["run_status"],
        "host": meta["host"],
        "sha256": meta["files"],
    }


def test_format_0_is_migrated_to_1(store, run):
    baseline = store.promote(run.directory, "b")
    path = writable(baseline.path / BASELINE_FILE)
    path.write_text(json.dumps(v0_document(json.loads(path.read_text()))))
    migrated = store.get("b")
    assert migrated.content_hash == baseline.content_hash
    assert migrated.files == baseline.files
    assert (migrated.source_run_id, migrated.run_status) == (run.run_id, "complete")
    assert (migrated.suite, migrated.run_status_reason) == (None, None)
    assert store.list()[0].latest == 1
    assert set(MIGRATIONS) == {0}
    # The migration still guards the files: a changed file is caught through format 0 too.
    writable(baseline.path / "summary.json").write_text("{}")
    with pytest.raises(BaselineCorruptError, match=r"summary\.json"):
        store.get("b")


def test_migrate_refuses_an_incomplete_format_0(store):
    with pytest.raises(BaselineCorruptError, match="'run_id' is missing"):
        migrate({"schema_version": 0, "sha256": {}}, "x")


@pytest.mark.parametrize(
    ("found", "advice"),
    [(2, "newer moeperf: upgrade"), (-1, "promote the run again"), ("1", "promote the run again")],
)
def test_unknown_format_is_refused_with_advice(store, run, found, advice):
    baseline = store.promote(run.directory, "b")
    path = writable(baseline.path / BASELINE_FILE)
    meta = json.loads(path.read_text())
    path.write_text(json.dumps({**meta, "schema_version": found}))
    with pytest.raises(
        ReportUsageError, match=f"schema_version {found!r} is not supported.*{advice}"
    ):
        store.get("b")


def test_load_run_data_equals_the_run_read_as_a_run(store, tmp_path, run):
    store.promote(run.directory, "b")
    from_run = load_run(RunStore(tmp_path / "runs"), run.run_id)
    from_baseline = store.load_run_data("b", 1)
    assert isinstance(from_baseline, RunData)
    assert from_baseline.manifest == from_run.manifest
    assert from_baseline.summary == from_run.summary
    assert from_baseline.run_id == run.run_id and from_baseline.kind == "serving"
    frames = [f.name for f in dataclasses.fields(RunData) if f.type in ("pd.DataFrame",)]
    assert {"requests", "steps"} <= set(frames)
    for name in frames:
        pd.testing.assert_frame_equal(getattr(from_baseline, name), getattr(from_run, name))
    assert len(from_baseline.requests) == 80 and len(from_baseline.steps) == 1
    # server_metrics.jsonl is not part of a baseline.
    assert from_run.server_metrics and from_baseline.server_metrics == []


def test_trend_across_three_versions(store, tmp_path):
    for scale in (1.0, 2.0, 3.0):
        store.promote(write_run(tmp_path / "runs", scale=scale).directory, "b")
    trend = store.trend("b")
    assert list(trend.columns) == [
        "version",
        "created",
        "scenario",
        "metric",
        "value",
        "ci_low",
        "ci_high",
        "count",
    ]
    assert sorted(trend["version"].unique()) == [1, 2, 3]
    assert set(trend["scenario"]) == {"c=1", "c=4"}
    assert {
        "ttft_s.p50",
        "ttft_s.p99",
        "tpot_s.p90",
        "itl_s.mean",
        "output_throughput_tok_s",
    } <= set(trend["metric"])
    p50 = trend[(trend["metric"] == "ttft_s.p50") & (trend["scenario"] == "c=4")]
    assert list(p50["version"]) == [1, 2, 3]
    assert p50["value"].is_monotonic_increasing
    assert p50["value"].iloc[2] == pytest.approx(3 * p50["value"].iloc[0], rel=0.01)
    assert (p50["ci_low"] <= p50["value"]).all() and (p50["value"] <= p50["ci_high"]).all()
    assert list(p50["count"]) == [38, 38, 38]  # 39 measured, one failed
    created = trend.drop_duplicates("version")["created"]
    assert list(created.dt.day) == [2, 3, 4] and str(created.dt.tz) == "UTC"
    summary = json.loads((store.get("b", 2).path / "summary.json").read_text())
    throughput = trend[
        (trend["metric"] == "output_throughput_tok_s")
        & (trend["version"] == 2)
        & (trend["scenario"] == "c=1")
    ]
    assert throughput["value"].item() == summary["scenarios"]["c=1"]["output_throughput_tok_s"]
    assert throughput["ci_low"].isna().all()
