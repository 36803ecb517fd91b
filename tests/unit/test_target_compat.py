"""Real third-party servers: the spec switches for what they reject, one choice per request,
and ``stream_end`` in stored runs, old ones included."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from moeperf.collectors.records import REQUEST_FIELDS, RequestRecord, StreamEnd
from moeperf.collectors.store import RunReader, RunStore
from moeperf.collectors.tables import request_records
from moeperf.specs import validate_spec
from moeperf.suites.errors import SpecError

BASELINE = Path(__file__).resolve().parents[2] / "reports/baselines/nightly/v1"


def target(**fields: object) -> dict[str, object]:
    return {"name": "t", "target": fields}


def test_more_than_one_choice_per_request_is_refused():
    with pytest.raises(SpecError) as info:
        validate_spec(target(extra_body={"n": 2}), "spec.toml")
    message = str(info.value)
    assert "target.extra_body" in message and "n = 2" in message
    assert "one choice per request" in message
    with pytest.raises(SpecError, match="one choice per request"):
        validate_spec({"name": "t"}, "spec.toml", ["target.extra_body={n = 3}"])
    one = validate_spec(target(extra_body={"n": 1, "min_p": 0.1}), "spec.toml")
    assert one.serving.target.extra_body == {"n": 1, "min_p": 0.1}


def test_switches_for_fields_some_servers_reject():
    default = validate_spec({"name": "t"}, "spec.toml").serving.target
    assert (default.include_usage, default.max_tokens_field, default.min_tokens) == (
        True,
        "max_tokens",
        None,
    )
    given = target(include_usage=False, max_tokens_field="max_completion_tokens", min_tokens=4)
    spec = validate_spec(given, "spec.toml").serving.target
    assert (spec.include_usage, spec.max_tokens_field, spec.min_tokens) == (
        False,
        "max_completion_tokens",
        4,
    )
    with pytest.raises(SpecError, match="max_completion_tokens"):
        validate_spec(target(max_tokens_field="max_new_tokens"), "spec.toml")


def test_a_run_stored_before_stream_end_existed_reads_it_as_null():
    assert "stream_end" not in pq.read_schema(BASELINE / "requests.parquet").names
    requests = RunReader(BASELINE).requests()
    assert list(requests.columns) == list(REQUEST_FIELDS)
    assert len(requests) > 0 and requests["stream_end"].isna().all()
    records = request_records(requests)
    assert all(r.stream_end is None for r in records)


def test_stream_end_round_trips_through_the_store(tmp_path):
    run = RunStore(tmp_path).create("serving")
    ends: list[StreamEnd | None] = ["done", "finish_reason", None]
    for i, end in enumerate(ends):
        run.append_request(
            RequestRecord(
                request_id=f"r{i}", scenario="c=1", phase="measure", worker=0,
                intended_send_ns=i, send_ns=i, done_ns=i + 1,
                status="ok" if end else "error", stream_end=end,
            )
        )  # fmt: skip
    live = RunReader(run.directory).requests()["stream_end"]
    run.complete()
    stored = RunReader(run.directory).requests()["stream_end"]
    for column in (live, stored):
        assert [None if pd.isna(v) else v for v in column] == ends
