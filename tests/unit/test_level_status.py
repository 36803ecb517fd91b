"""A level's status and the run's, by the rule in suites/serving/load/validity.py."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest

from moeperf.collectors.records import RequestRecord
from moeperf.collectors.serving_records import ServingSummary, empty_scenario
from moeperf.collectors.summary_json import SummaryFormatError, summary_from_json, summary_to_json
from moeperf.suites.serving.load.backoff import ConnectBackoff
from moeperf.suites.serving.load.validity import (
    LevelCounts,
    LevelVerdict,
    MeasuredTally,
    judge_level,
    measured_counts,
    run_verdict,
)

CPU_BOUND = ["worker 0: client CPU 93% of a core > 90%"]


def test_a_level_of_connect_errors_is_the_targets_failure_not_client_bound():
    # Issue 11, item 6: 100% connect errors while the client spun at 93% CPU.
    counts = LevelCounts(requests=60, ok=0, cancelled=0, error_types={"connect_error": 60})
    verdict = judge_level("c=1", counts, CPU_BOUND)
    assert verdict.status == "failed"
    assert verdict.reason == "connect_error 60: 60 of 60 measured requests failed"
    assert verdict.client_bottleneck == ()


def test_error_types_come_first_most_frequent_first_then_cancelled():
    counts = LevelCounts(
        requests=10, ok=3, cancelled=1, error_types={"http_5xx": 2, "stream_truncated": 4}
    )
    assert judge_level("c=4", counts, []).reason == (
        "stream_truncated 4, http_5xx 2; cancelled 1 (not done when the level ended): "
        "7 of 10 measured requests failed"
    )


@pytest.mark.parametrize(("ok", "status"), [(5, "ok"), (4, "failed")])
def test_more_than_half_failed_is_the_threshold(ok, status):
    counts = LevelCounts(requests=10, ok=ok, cancelled=0, error_types={"timeout": 10 - ok})
    assert judge_level("c=1", counts, []).status == status


def test_a_sound_level_over_a_harness_limit_is_invalid():
    counts = LevelCounts(requests=50, ok=50, cancelled=0, error_types={})
    verdict = judge_level("c=64", counts, CPU_BOUND)
    assert verdict.status == "invalid"
    assert verdict.reason == f"client was the bottleneck: {CPU_BOUND[0]}"
    assert verdict.client_bottleneck == tuple(CPU_BOUND)


def test_a_level_without_measured_requests_failed():
    counts = LevelCounts(requests=0, ok=0, cancelled=0, error_types={})
    assert judge_level("c=1", counts, []).status == "failed"


def test_one_client_bound_level_makes_the_run_invalid_and_names_only_it():
    ok = LevelVerdict("c=1", "ok")
    invalid = LevelVerdict("c=64", "invalid", "client was the bottleneck: x")
    assert run_verdict([ok, invalid]) == (
        "invalid",
        "levels invalid: c=64 (client was the bottleneck: x)",
    )
    assert run_verdict([ok, ok]) == ("complete", None)


def test_a_failed_level_makes_the_run_failed_and_every_bad_level_is_named():
    failed = LevelVerdict("c=4", "failed", "connect_error 9: 9 of 9 measured requests failed")
    invalid = LevelVerdict("c=64", "invalid", "client was the bottleneck: x")
    status, reason = run_verdict([LevelVerdict("c=1", "ok"), failed, invalid])
    assert status == "failed"
    assert reason == (
        "levels failed: c=4 (connect_error 9: 9 of 9 measured requests failed)"
        " | levels invalid: c=64 (client was the bottleneck: x)"
    )


def record(i: int, scenario: str, phase: str, status: str, error: str | None = None):
    return RequestRecord(
        request_id=f"r{i}", scenario=scenario, phase=phase, worker=0,  # type: ignore[arg-type]
        intended_send_ns=i, send_ns=i, done_ns=i + 1, status=status,  # type: ignore[arg-type]
        error_type=error,
    )  # fmt: skip


RECORDS = [
    record(0, "c=1", "warmup", "error", "connect_error"),
    record(1, "c=1", "measure", "ok"),
    record(2, "c=1", "measure", "error", "http_5xx"),
    record(3, "c=1", "measure", "cancelled"),
    record(4, "c=2", "measure", "error", "http_5xx"),
    record(5, "c=1", "measure", "error", None),
    record(6, "c=1", "cooldown", "ok"),
]


def test_counts_are_the_levels_measured_requests_only():
    assert measured_counts(RECORDS, "c=1") == LevelCounts(
        requests=4, ok=1, cancelled=1, error_types={"http_5xx": 1, "unknown": 1}
    )


def test_the_running_tally_counts_as_the_records_do():
    tally = MeasuredTally()
    for r in RECORDS:
        tally.add(r)
    for scenario in ("c=1", "c=2", "c=3"):
        assert tally.counts(scenario) == measured_counts(RECORDS, scenario)


def test_backoff_doubles_per_failed_probe_up_to_its_cap_and_resets_on_an_answer():
    backoff = ConnectBackoff(random.Random(0), initial_s=0.01, max_s=1.0)
    assert not backoff.active  # healthy: nothing waits
    # Requests already sent when the target went away fail together: they count once.
    for _ in range(8):
        backoff.observe(True, probe=False)
    assert backoff.wait_s == 0.01
    waits = []
    for _ in range(9):
        backoff.observe(True, probe=True)
        waits.append(backoff.wait_s)
    assert waits == [0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.0, 1.0, 1.0]
    backoff.observe(False, probe=True)
    assert not backoff.active and backoff.wait_s == 0


def test_a_levels_status_survives_summary_json_and_older_files_read_as_ok():
    failed = dataclasses.replace(
        empty_scenario(), status="failed", status_reason="connect_error 3: 3 of 3 failed"
    )
    summary = ServingSummary(scenarios={"c=1": failed, "c=2": empty_scenario()})
    body = json.loads(json.dumps(summary_to_json(summary)))
    assert body["scenarios"]["c=1"]["status"] == "failed"
    back = summary_from_json(body, "summary.json")
    assert back == summary
    # A file written before levels had a status.
    for entry in body["scenarios"].values():
        del entry["status"], entry["status_reason"]
    older = summary_from_json(body, "summary.json")
    assert isinstance(older, ServingSummary)
    assert {e.status for e in older.scenarios.values()} == {"ok"}
    body["scenarios"]["c=1"]["status"] = "broken"
    with pytest.raises(SummaryFormatError, match="status"):
        summary_from_json(body, "summary.json")
