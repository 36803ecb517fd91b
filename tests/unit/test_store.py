"""RunStore: records round-trip, manifests end once, runs open by name, bad files refused."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from run_factory import store_run

from moeperf.collectors.errors import CollectorError, RunNotFoundError, SchemaVersionError
from moeperf.collectors.manifest import RunManifest
from moeperf.collectors.records import REQUEST_FIELDS, STEP_FIELDS, RequestRecord, StepRecord
from moeperf.collectors.schema import SCHEMA_VERSION, SUMMARY_SCHEMA_VERSION
from moeperf.collectors.serving_records import ServingSummary, empty_scenario
from moeperf.collectors.store import RunInterrupted, RunReader, RunStore
from moeperf.collectors.tables import records_frame

MS = 1_000_000


def request(i: int, **overrides: Any) -> RequestRecord:
    base: dict[str, Any] = dict(
        request_id=f"r{i}",
        scenario="c=2",
        phase="measure",
        worker=i % 2,
        intended_send_ns=i * 100 * MS,
        send_ns=i * 100 * MS + 1000,
        done_ns=i * 100 * MS + 90 * MS,
        status="ok",
        chunk_ns=[i * 100 * MS + 5 * MS, i * 100 * MS + 50 * MS, i * 100 * MS + 60 * MS],
        chunk_tokens=[0, 1, 2],
        chunk_tokens_source="usage_stats",
        first_token_ns=i * 100 * MS + 50 * MS,
        last_token_ns=i * 100 * MS + 60 * MS,
        prompt_tokens=128,
        output_tokens=3,
        client_prompt_tokens=127,
        client_output_tokens=3,
        http_status=200,
        server_request_id=f"srv-{i}",
    )
    base.update(overrides)
    return RequestRecord(**base)


def failed_request(i: int) -> RequestRecord:
    # Nulls everywhere a failed request has nothing to say.
    return RequestRecord(
        request_id=f"r{i}",
        scenario="c=2",
        phase="warmup",
        worker=0,
        intended_send_ns=i * MS,
        send_ns=i * MS,
        done_ns=i * MS + 7,
        status="error",
        error_type="http_status",
        error_message="500 Internal Server Error: boom \u00e9\u4e2d",
        http_status=500,
    )


def step(i: int, **overrides: Any) -> StepRecord:
    base: dict[str, Any] = dict(
        step=i,
        rank=0,
        start_ns=i * 1000 * MS,
        end_ns=i * 1000 * MS + 900 * MS,
        tokens=4096,
        scenario="train",
        microbatch=None,
        loss=2.5 - i * 0.125,
        model_flops=1.5e15,
        mfu=0.41,
        peak_memory_bytes=80 * 2**30,
        tokens_per_expert=[[10, 20, 30, 40], [25, 25, 25, 25]],
        policy_decisions=[{"kind": "rebalance", "layer": 1, "moved": [3, 0]}],
        events=[{"kind": "oom", "at_ns": 5}] if i == 1 else [],
    )
    base.update(overrides)
    return StepRecord(**base)


REQUESTS = [
    request(0),
    failed_request(1),
    request(2, phase="cooldown", chunk_ns=[], chunk_tokens=[]),
]
STEPS = [step(0), step(1, microbatch=3, loss=None, mfu=None, tokens_per_expert=[]), step(2)]


def _cell(value):
    if isinstance(value, np.ndarray):
        return [_cell(v) for v in value]
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


def rows(frame: pd.DataFrame) -> list[dict]:
    """The frame as plain Python rows (arrays as lists, NaN/NA as None)."""
    return [
        {column: _cell(value) for column, value in record.items()}
        for record in frame.astype(object).to_dict(orient="records")
    ]


def expected_rows(records) -> list[dict]:
    return [r.to_dict() for r in records]


@pytest.fixture
def store(tmp_path: Path) -> RunStore:
    return RunStore(tmp_path / "runs")


def write_run(store: RunStore, *, complete: bool = True):
    return store_run(
        store,
        REQUESTS,
        steps=STEPS,
        spec_given={"name": "t"},
        target={"kind": "synthetic"},
        end="complete" if complete else None,
    )


def crashed_run(store: RunStore):
    """A run whose process died: records on disk, files closed (by the OS), never ended."""
    run = write_run(store, complete=False)
    for f in run._files.values():
        f.close()
    return run


# --- round trip --------------------------------------------------------------------------


def test_requests_and_steps_round_trip_identically_from_jsonl_and_parquet(store):
    run = write_run(store, complete=False)
    assert (run.directory / "requests.jsonl").exists()
    assert not (run.directory / "requests.parquet").exists()

    live = store.open(run.run_id)
    assert live.manifest.status == "running"
    requests_jsonl, steps_jsonl = live.requests(), live.steps()

    run.complete()
    assert not (run.directory / "requests.jsonl").exists(), "one copy of the data"
    assert (run.directory / "requests.parquet").exists()
    assert (run.directory / "steps.parquet").exists()
    done = store.open(run.run_id)
    requests_parquet, steps_parquet = done.requests(), done.steps()

    assert list(requests_jsonl.columns) == list(REQUEST_FIELDS)
    assert list(steps_jsonl.columns) == list(STEP_FIELDS)
    pd.testing.assert_series_equal(requests_jsonl.dtypes, requests_parquet.dtypes)
    pd.testing.assert_series_equal(steps_jsonl.dtypes, steps_parquet.dtypes)
    pd.testing.assert_frame_equal(requests_jsonl, requests_parquet)
    pd.testing.assert_frame_equal(steps_jsonl, steps_parquet)

    assert rows(requests_parquet) == expected_rows(REQUESTS)
    assert rows(steps_parquet) == expected_rows(STEPS)
    # In-memory records are typed exactly as a stored run reads back.
    pd.testing.assert_frame_equal(records_frame(REQUESTS), requests_parquet)


@pytest.mark.parametrize("batch_rows", [3, 20_000])
def test_amended_records_read_back_once_in_first_order_across_batches(
    store, monkeypatch, batch_rows
):
    # A record is amended when client-side token counts come after its level: readers,
    # the writer's own read-back and the parquet file keep its last version, in the order
    # requests first appeared, also when the versions fall in different parse batches.
    monkeypatch.setattr("moeperf.collectors.run_tables._BATCH_ROWS", batch_rows)
    run = store.create("serving")
    for i in range(7):
        run.append_request(request(i, client_output_tokens=None))
    for i in (5, 1, 6):
        run.append_request(request(i, client_output_tokens=100 + i))
    run.append_request(request(7))

    live = run.requests_frame()
    assert list(live["request_id"]) == [f"r{i}" for i in range(8)]
    amended = dict(zip(live["request_id"], live["client_output_tokens"], strict=True))
    assert {k: amended[k] for k in ("r1", "r5", "r6")} == {"r1": 101, "r5": 105, "r6": 106}
    assert pd.isna(amended["r0"]) and amended["r7"] == 3
    pd.testing.assert_frame_equal(live, store.open(run.run_id).requests())
    run.complete()
    pd.testing.assert_frame_equal(live, store.open(run.run_id).requests())


def test_timestamps_keep_full_nanosecond_precision(store):
    big = 2**62 + 1  # not representable as float64
    run = store.create("serving")
    run.append_request(request(0, send_ns=big, done_ns=big + 1, chunk_ns=[big, big + 1]))
    run.complete()
    frame = store.open(run.run_id).requests()
    assert frame["send_ns"].dtype == np.int64
    assert int(frame["send_ns"][0]) == big
    assert [int(v) for v in frame["chunk_ns"][0]] == [big, big + 1]


def test_run_without_records_reads_back_empty_frames_with_the_schema(store):
    run = store.create("serving")
    live_requests = store.open(run.run_id).requests()
    run.complete()
    reader = store.open(run.run_id)
    for frame in (live_requests, reader.requests()):
        assert len(frame) == 0
        assert list(frame.columns) == list(REQUEST_FIELDS)
    assert list(reader.steps().columns) == list(STEP_FIELDS)
    assert reader.server_metrics() == []
    assert reader.summary() is None


def test_server_metrics_and_summary_round_trip(store):
    run = store.create("serving")
    run.append_server_metrics({"t_ns": 5, "counters": {"tokens": 10}})
    summary = ServingSummary(scenarios={"c=1": dataclasses.replace(empty_scenario(), ok=3)})
    run.write_summary(summary)
    run.complete()
    reader = store.open(run.run_id)
    assert reader.server_metrics() == [
        {"schema_version": SCHEMA_VERSION, "t_ns": 5, "counters": {"tokens": 10}}
    ]
    assert reader.summary() == summary and reader.summary().scenarios["c=1"].ok == 3
    written = json.loads((run.directory / "summary.json").read_text())
    assert written["schema_version"] == SUMMARY_SCHEMA_VERSION


# --- manifest ----------------------------------------------------------------------------


def test_manifest_records_what_the_run_is_and_where_it_ran(store):
    run = store.create(
        "serving", spec_given={"name": "g"}, spec_resolved={"name": "r"}, target={"kind": "url"}
    )
    data = json.loads((run.directory / "manifest.json").read_text())
    assert data["schema_version"] == SCHEMA_VERSION
    assert data["run_id"] == run.run_id == run.directory.name
    assert "serving" in run.run_id
    assert data["suite"] == "serving"
    assert data["status"] == "running"
    assert data["status_reason"] is None
    assert data["spec_given"] == {"name": "g"}
    assert data["spec_resolved"] == {"name": "r"}
    assert data["target"] == {"kind": "url"}
    assert data["pid"] == os.getpid()
    assert data["hostname"] == socket.gethostname()
    assert isinstance(data["anchor_monotonic_ns"], int)
    assert data["anchor_wall_time"]
    host = data["host"]
    for key in ("cpu_model", "logical_cores", "memory_bytes", "python", "gpus", "libraries"):
        assert key in host, key
    assert host["logical_cores"] >= 1
    assert host["memory_bytes"] > 0
    assert "pyarrow" in host["libraries"]
    run.complete()


def test_clock_sets_the_anchor(tmp_path):
    run = RunStore(tmp_path, clock_ns=lambda: 123_456).create("serving")
    assert run.manifest.anchor_monotonic_ns == 123_456
    assert RunStore(tmp_path).open(run.run_id).manifest.anchor_monotonic_ns == 123_456
    run.complete()


@pytest.mark.parametrize(
    ("end", "status", "reason"),
    [
        (lambda run: run.complete(), "complete", None),
        (lambda run: run.abort("target died"), "aborted", "target died"),
        (
            lambda run: run.invalidate("client was the bottleneck"),
            "invalid",
            "client was the bottleneck",
        ),
    ],
)
def test_status_transitions_are_written_and_end_once(store, end, status, reason):
    run = write_run(store, complete=False)
    assert not run.ended
    end(run)
    assert run.ended
    reader = store.open(run.run_id)
    assert reader.manifest.status == status
    assert reader.manifest.status_reason == reason
    assert reader.manifest.ended_wall_time
    # Whatever the ending, the data is there and converted.
    assert len(reader.requests()) == len(REQUESTS)
    assert (run.directory / "requests.parquet").exists()
    for again in (run.complete, lambda: run.abort("x"), lambda: run.invalidate("y")):
        with pytest.raises(CollectorError, match="already ended"):
            again()
    assert store.open(run.run_id).manifest.status == status


def test_notes_are_saved_in_the_manifest(store):
    run = store.create("serving")
    run.add_note("warm-up excluded")
    assert store.open(run.run_id).manifest.notes == ["warm-up excluded"]
    run.complete()
    assert store.open(run.run_id).manifest.notes == ["warm-up excluded"]


# --- context manager ---------------------------------------------------------------------


def test_leaving_the_block_completes_the_run(store):
    with store.create("serving") as run:
        run.append_request(request(0))
    assert store.open(run.run_id).manifest.status == "complete"


def test_an_exception_aborts_the_run_with_its_text_and_keeps_the_data(store):
    with pytest.raises(ValueError, match="bad thing"), store.create("serving") as run:
        run.append_request(request(0))
        raise ValueError("bad thing")
    reader = store.open(run.run_id)
    assert reader.manifest.status == "aborted"
    assert reader.manifest.status_reason == "ValueError: bad thing"
    assert list(reader.requests()["request_id"]) == ["r0"]


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (RunInterrupted("SIGTERM"), "interrupted by SIGTERM"),
        (RunInterrupted("SIGINT"), "interrupted by SIGINT"),
        (KeyboardInterrupt(), "interrupted by SIGINT"),
    ],
)
def test_interruptions_abort_the_run_naming_the_signal(store, exc, reason):
    with pytest.raises(type(exc)), store.create("serving") as run:
        run.append_request(request(0))
        raise exc
    reader = store.open(run.run_id)
    assert reader.manifest.status == "aborted"
    assert reader.manifest.status_reason == reason
    assert len(reader.requests()) == 1


def test_a_run_ended_inside_the_block_keeps_its_status(store):
    with store.create("serving") as run:
        run.invalidate("client was the bottleneck")
    reader = store.open(run.run_id)
    assert reader.manifest.status == "invalid"
    assert reader.manifest.status_reason == "client was the bottleneck"


# --- opening runs ------------------------------------------------------------------------


def _fake_run(root: Path, run_id: str, **fields) -> Path:
    directory = root / run_id
    directory.mkdir(parents=True)
    manifest = RunManifest(
        run_id=run_id,
        suite="serving",
        anchor_monotonic_ns=0,
        anchor_wall_time="2026-01-01T00:00:00.000+00:00",
        host={},
        status="complete",
        **fields,
    )
    (directory / "manifest.json").write_text(manifest.to_json())
    return directory


def test_open_by_id_prefix_latest_and_directory(tmp_path):
    root = tmp_path / "runs"
    ids = ["20260101-000000-serving-aaaaaa", "20260101-000001-serving-bbbbbb"]
    ids.append("20260102-000000-training-cccccc")
    for run_id in ids:
        _fake_run(root, run_id)
    store = RunStore(root)
    assert store.run_ids() == ids
    assert [m.run_id for m in store.list()] == ids
    for run_id in ids:
        assert store.open(run_id).run_id == run_id
    assert store.open("20260102").run_id == ids[2]
    assert store.open("20260101-000001").run_id == ids[1]
    assert store.open("latest").run_id == ids[2]
    reader = store.open(str(root / ids[0]))
    assert isinstance(reader, RunReader)
    assert reader.run_id == ids[0]
    assert reader.directory == root / ids[0]
    # A directory path works from any store root.
    assert RunStore(tmp_path / "elsewhere").open(str(root / ids[1])).run_id == ids[1]


def test_open_unknown_and_ambiguous_runs_say_so(tmp_path):
    root = tmp_path / "runs"
    _fake_run(root, "20260101-000000-serving-aaaaaa")
    _fake_run(root, "20260101-000001-serving-bbbbbb")
    store = RunStore(root)
    with pytest.raises(RunNotFoundError, match=r"no run 'nosuchrun'.*runs list"):
        store.open("nosuchrun")
    with pytest.raises(RunNotFoundError, match="matches 2 runs") as info:
        store.open("20260101")
    assert "20260101-000000-serving-aaaaaa" in str(info.value)
    assert "20260101-000001-serving-bbbbbb" in str(info.value)
    assert issubclass(RunNotFoundError, CollectorError)


def test_open_on_an_empty_or_missing_root(tmp_path):
    store = RunStore(tmp_path / "never-created")
    assert store.run_ids() == []
    assert store.list() == []
    for name in ("latest", "2026"):
        with pytest.raises(RunNotFoundError):
            store.open(name)
    assert not (tmp_path / "never-created").exists()


def test_directories_without_a_manifest_are_not_runs(tmp_path):
    root = tmp_path / "runs"
    _fake_run(root, "20260101-000000-serving-aaaaaa")
    (root / "20270101-000000-serving-zzzzzz").mkdir()  # e.g. a crash before the manifest
    (root / "notes.txt").write_text("hi")
    store = RunStore(root)
    assert store.run_ids() == ["20260101-000000-serving-aaaaaa"]
    assert store.open("latest").run_id == "20260101-000000-serving-aaaaaa"


def test_latest_is_the_run_created_last_within_one_second(store, monkeypatch):
    suffixes = iter(["ffffff", "000000"])
    monkeypatch.setattr("moeperf.collectors.store.secrets.token_hex", lambda _n: next(suffixes))
    first = store.create("serving")
    second = store.create("serving")
    first.complete()
    second.complete()
    if first.run_id[:15] != second.run_id[:15]:
        pytest.skip("the two runs straddled a second boundary")
    assert store.open("latest").run_id == second.run_id
    assert store.run_ids() == [first.run_id, second.run_id]


# --- damaged files -----------------------------------------------------------------------


def test_a_truncated_last_line_is_skipped(store):
    run = crashed_run(store)
    path = run.directory / "requests.jsonl"
    line = json.dumps(request(3).to_dict(), separators=(",", ":"))
    with open(path, "a", encoding="utf-8") as f:
        f.write(line[: len(line) // 2])  # the process died mid-write
    frame = store.open(run.run_id).requests()
    assert list(frame["request_id"]) == ["r0", "r1", "r2"]
    assert rows(frame) == expected_rows(REQUESTS)


def test_a_truncated_last_line_does_not_stop_completion(store):
    run = write_run(store, complete=False)
    with open(run.directory / "steps.jsonl", "a", encoding="utf-8") as f:
        f.write('{"step": 3, "rank": 0, "sta')
    run.abort("crashed")
    reader = store.open(run.run_id)
    assert list(reader.steps()["step"]) == [0, 1, 2]
    assert reader.manifest.status == "aborted"


def test_a_corrupt_middle_line_raises_naming_the_line(store):
    run = crashed_run(store)
    path = run.directory / "requests.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    lines[1] = lines[1][:20] + "\n"
    path.write_text("".join(lines))
    with pytest.raises(CollectorError, match=r"requests\.jsonl:2: not valid JSON"):
        store.open(run.run_id).requests()


def test_a_blank_middle_line_raises_naming_the_line(store):
    run = crashed_run(store)
    path = run.directory / "steps.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text(lines[0] + "\n" + "".join(lines[1:]))
    with pytest.raises(CollectorError, match=r"steps\.jsonl:2"):
        store.open(run.run_id).steps()


# --- schema versions ---------------------------------------------------------------------


def _assert_advice(error: pytest.ExceptionInfo, where: str) -> None:
    message = str(error.value)
    assert where in message
    assert "not supported" in message
    assert "this moeperf reads 1" in message


def test_unknown_manifest_version_is_refused_with_advice(store):
    run = write_run(store)
    path = run.directory / "manifest.json"
    data = json.loads(path.read_text())
    data["schema_version"] = SCHEMA_VERSION + 98
    path.write_text(json.dumps(data))
    with pytest.raises(SchemaVersionError) as info:
        store.open(run.run_id)
    _assert_advice(info, "manifest.json")
    assert "upgrade moeperf" in str(info.value)
    assert "99" in str(info.value)

    data.pop("schema_version")
    path.write_text(json.dumps(data))
    with pytest.raises(SchemaVersionError) as info:
        store.open(run.run_id)
    _assert_advice(info, "manifest.json")
    assert "re-run" in str(info.value)


def test_unknown_version_in_a_jsonl_line_is_refused_with_advice(store):
    run = crashed_run(store)
    path = run.directory / "requests.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    row = json.loads(lines[1])
    row["schema_version"] = 7
    lines[1] = json.dumps(row) + "\n"
    path.write_text("".join(lines))
    with pytest.raises(SchemaVersionError) as info:
        store.open(run.run_id).requests()
    _assert_advice(info, "requests.jsonl:2")
    assert "upgrade moeperf" in str(info.value)


def _rewrite_parquet_metadata(path: Path, metadata: dict | None) -> None:
    table = pq.read_table(path)
    pq.write_table(table.replace_schema_metadata(metadata), path)


@pytest.mark.parametrize(
    ("metadata", "advice"),
    [
        ({"moeperf_schema_version": "2"}, "upgrade moeperf"),
        ({"moeperf_schema_version": "zero"}, "re-run"),
        (None, "re-run"),
    ],
)
def test_unknown_version_in_parquet_metadata_is_refused_with_advice(store, metadata, advice):
    run = write_run(store)
    for name, read in (("requests", RunReader.requests), ("steps", RunReader.steps)):
        path = run.directory / f"{name}.parquet"
        assert pq.read_schema(path).metadata[b"moeperf_schema_version"] == b"1"
        _rewrite_parquet_metadata(path, metadata)
        with pytest.raises(SchemaVersionError) as info:
            read(store.open(run.run_id))
        _assert_advice(info, f"{name}.parquet")
        assert advice in str(info.value)


def test_unknown_summary_version_is_refused(store):
    run = store.create("serving")
    run.write_summary(ServingSummary())
    run.complete()
    path = run.directory / "summary.json"
    path.write_text(json.dumps({"schema_version": 5, "scenarios": {}}))
    with pytest.raises(SchemaVersionError, match=r"summary\.json"):
        store.open(run.run_id).summary()


def test_manifest_fields_from_a_later_minor_version_are_ignored(store):
    run = write_run(store)
    path = run.directory / "manifest.json"
    data = json.loads(path.read_text())
    data["added_later"] = {"x": 1}
    path.write_text(json.dumps(data))
    assert store.open(run.run_id).manifest.status == "complete"


# --- orphaned runs -----------------------------------------------------------------------


def _dead_pid() -> int:
    process = subprocess.Popen(["sleep", "0"])
    process.wait()
    return process.pid


def _set_manifest(directory: Path, **fields) -> None:
    path = directory / "manifest.json"
    data = json.loads(path.read_text())
    data.update(fields)
    path.write_text(json.dumps(data))


def test_a_running_run_whose_process_is_gone_reads_back_as_aborted(store):
    run = crashed_run(store)
    pid = _dead_pid()
    _set_manifest(run.directory, pid=pid)
    reader = store.open(run.run_id)
    assert reader.manifest.status == "aborted"
    assert str(pid) in reader.manifest.status_reason
    assert "killed" in reader.manifest.status_reason
    # Its data is still there, from the JSONL.
    assert rows(reader.requests()) == expected_rows(REQUESTS)
    assert [m.status for m in store.list()] == ["aborted"]


def test_a_running_run_whose_process_lives_stays_running(store):
    run = write_run(store, complete=False)
    assert store.open(run.run_id).manifest.status == "running"
    run.complete()


def test_a_run_from_another_host_is_not_judged_by_local_pids(store):
    run = crashed_run(store)
    _set_manifest(run.directory, pid=_dead_pid(), hostname=socket.gethostname() + "-other")
    assert store.open(run.run_id).manifest.status == "running"


def test_an_ended_run_is_not_touched_by_the_orphan_check(store):
    run = write_run(store)
    _set_manifest(run.directory, pid=_dead_pid())
    reader = store.open(run.run_id)
    assert reader.manifest.status == "complete"
    assert reader.manifest.status_reason is None


def test_sample_records_round_trip(store):
    from moeperf.collectors.records import SampleRecord

    run = store.create("micro")
    run.append_sample(SampleRecord("sse_parse", 1.5e-5, "s", "lower", scenario="x"))
    run.append_sample(SampleRecord("sse_parse", 1.7e-5, "s", "lower", scenario="x"))
    before = store.open(run.run_id).samples()
    run.complete()
    after = store.open(run.run_id).samples()
    assert list(after["value"]) == [1.5e-5, 1.7e-5]
    assert after.equals(before)
    assert store.open(run.run_id).requests().empty


def test_list_column_helpers_agree_for_numpy_and_arrow_backed_columns():
    import numpy as np
    import pandas as pd
    import pyarrow as pa

    from moeperf.collectors.tables import flatten_list_column, list_column_lengths

    values = [[1, 2, 3], [], None, [4]]
    arrow = pa.array(values, type=pa.list_(pa.int32())).to_pandas(types_mapper=pd.ArrowDtype)
    plain = pd.Series([np.asarray(v) if v is not None else None for v in values], dtype=object)
    for column in (arrow, plain):
        assert list(list_column_lengths(column)) == [3, 0, 0, 1]
        assert list(flatten_list_column(column)) == [1, 2, 3, 4]
        assert flatten_list_column(column).dtype == np.int64
