"""summary.json: every summary record round-trips, and version 1 files still read."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from moeperf.collectors.errors import CollectorError, SchemaVersionError
from moeperf.collectors.micro_summary import MicroSummary, summarize_rounds
from moeperf.collectors.quantiles import describe
from moeperf.collectors.serving_records import ServingSummary, empty_scenario
from moeperf.collectors.store import RunReader, RunStore
from moeperf.collectors.summary_json import summary_from_json, summary_to_json
from moeperf.collectors.training_summary import (
    BudgetCalibration,
    PeakFlopsSummary,
    ScenarioOutcome,
    TrainingSummary,
    summarize_training,
)

BASELINE = Path(__file__).resolve().parents[2] / "reports/baselines/nightly/v1"


def training() -> TrainingSummary:
    budget = BudgetCalibration(1010, 1.01, 1000, (990, 1000), "keep-all, calm skew, no budget")
    return summarize_training(
        "mfu",
        [ScenarioOutcome("keep-all/calm", "keep-all", "calm", "", 1010, skipped_samples=[3])],
        PeakFlopsSummary(1e11, "measured", {"size": 256, "dtype": "float32"}),
        {"": budget},
    )


def micro() -> MicroSummary:
    return MicroSummary(
        sample="one sample per round",
        benchmarks={"test_a": summarize_rounds([0.002, 0.003, 0.001], "g", 3)},
    )


def serving() -> ServingSummary:
    entry = dataclasses.replace(
        empty_scenario(),
        requests=5,
        ok=5,
        level=2.0,
        client_bottleneck=("worker 0: busy",),
    )
    return ServingSummary(scenarios={"c=2": entry})


@pytest.mark.parametrize("make", [serving, training, micro])
def test_every_summary_round_trips_through_the_store(tmp_path, make):
    summary = make()
    run = RunStore(tmp_path).create(summary.SUITE)
    run.write_summary(summary)
    run.complete()
    assert RunReader(run.directory).summary() == summary
    written = json.loads((run.directory / "summary.json").read_text())
    assert written["schema_version"] == 2 and written["suite"] == summary.SUITE


def test_json_keeps_the_field_names_and_quantiles_as_a_list():
    body = summary_to_json(micro())
    entry = body["benchmarks"]["test_a"]
    assert entry["median"] == 0.002 and entry["min"] == 0.001 and entry["count"] == 3
    assert [q["q"] for q in entry["quantiles"]] == [0.5, 0.9, 0.99]
    assert set(entry["quantiles"][0]) == {"q", "value", "ci_low", "ci_high"}


def test_the_committed_version_1_baseline_reads_and_writes_back_the_same_fields():
    summary = RunReader(BASELINE).summary()
    assert isinstance(summary, ServingSummary)
    assert list(summary.scenarios) == ["c=1", "c=8", "c=32"]
    entry = summary.scenarios["c=1"]
    assert entry.level == 1.0 and entry.harness[0].selfwatch.lag_samples == 830
    assert entry.latency_s.ttft_s.value_at(0.5) == 0.047408013
    assert entry.harness_error_s is not None and entry.harness_error_s.ttft.count == 9
    old = json.loads((BASELINE / "summary.json").read_text())
    new = summary_to_json(summary)
    assert old.pop("schema_version") == 1 and new.pop("schema_version") == 2
    assert new.pop("suite") == "serving"
    # Same fields, same order; fields added since (with their defaults) come after them.
    assert json.dumps(_only_fields_of(new, old)) == json.dumps(old)


def _only_fields_of(new: Any, old: Any) -> Any:
    """``new`` without the keys ``old`` lacks, at every depth, checking that each one
    dropped comes after every kept key of its object."""
    if isinstance(new, dict) and isinstance(old, dict):
        keys = list(new)
        kept = [k for k in keys if k in old]
        assert keys[: len(kept)] == kept, f"fields added before old ones: {keys}"
        return {k: _only_fields_of(new[k], old[k]) for k in kept}
    # summary_to_json keeps tuples (json.dumps writes them as lists).
    if isinstance(new, (list, tuple)) and isinstance(old, list) and len(new) == len(old):
        return [_only_fields_of(n, o) for n, o in zip(new, old, strict=True)]
    return new


def test_version_1_files_of_each_suite_read_without_their_tag():
    for summary in (serving(), training(), micro()):
        body = summary_to_json(summary)
        body.pop("suite")
        assert summary_from_json({**body, "schema_version": 1}, "summary.json") == summary


def test_a_version_1_scenario_with_only_the_runners_fields_reads_as_empty():
    body = {
        "schema_version": 1,
        "scenarios": {"c=4": {"level": 4.0, "harness": [], "client_bottleneck": []}},
    }
    summary = summary_from_json(body, "summary.json")
    assert summary == ServingSummary(
        scenarios={"c=4": dataclasses.replace(empty_scenario(), level=4.0)}
    )


def test_unknown_fields_are_ignored_and_missing_ones_named():
    body = summary_to_json(serving())
    body["scenarios"]["c=2"]["added_later"] = 1
    assert summary_from_json(body, "summary.json") == serving()
    del body["scenarios"]["c=2"]["ok"]
    with pytest.raises(CollectorError, match=r"summary\.json\.scenarios\.c=2: no 'ok'"):
        summary_from_json(body, "summary.json")


def test_a_wrong_type_or_suite_or_version_is_refused():
    body = summary_to_json(micro())
    body["benchmarks"]["test_a"]["iterations"] = "three"
    with pytest.raises(CollectorError, match="iterations: 'three' is not of type int"):
        summary_from_json(body, "summary.json")
    with pytest.raises(CollectorError, match="suite 'prefill' is not one of"):
        summary_from_json({**summary_to_json(micro()), "suite": "prefill"}, "summary.json")
    with pytest.raises(SchemaVersionError, match="upgrade moeperf"):
        summary_from_json({**summary_to_json(micro()), "schema_version": 3}, "summary.json")


def test_described_is_one_record_whatever_it_describes():
    summary = summary_from_json(summary_to_json(micro()), "summary.json")
    assert isinstance(summary, MicroSummary)
    assert summary.benchmarks["test_a"].rounds == describe([0.002, 0.003, 0.001])


def test_numpy_scalars_and_nan_are_written_as_plain_json_numbers():
    # numpy scalars reach records from pandas and numpy reductions, past the type hints.
    odd = dataclasses.replace(
        empty_scenario(),
        requests=np.int64(3),  # type: ignore[arg-type]  # the numpy scalar under test
        window_s=float("nan"),
        level=np.float32(2.0),  # type: ignore[arg-type]  # the numpy scalar under test
    )
    text = json.dumps(summary_to_json(ServingSummary(scenarios={"c=2": odd})))
    entry = json.loads(text)["scenarios"]["c=2"]
    assert entry["requests"] == 3 and entry["level"] == 2.0 and math.isnan(entry["window_s"])
    assert '"window_s": NaN' in text


def test_ints_read_as_floats_and_lists_as_tuples_but_strings_and_bools_are_no_numbers():
    body = json.loads(json.dumps(summary_to_json(serving())))
    body["scenarios"]["c=2"]["window_s"] = 3
    summary = summary_from_json(body, "summary.json")
    assert isinstance(summary, ServingSummary)
    entry = summary.scenarios["c=2"]
    assert entry.window_s == 3.0 and isinstance(entry.window_s, float)
    assert entry.client_bottleneck == ("worker 0: busy",)
    for bad in ("5", True, 5.0):
        body["scenarios"]["c=2"]["ok"] = bad
        with pytest.raises(CollectorError, match=r"summary\.json\.scenarios\.c=2\.ok: .* int"):
            summary_from_json(body, "summary.json")


def test_every_problem_is_one_line_naming_the_file_and_the_field_path():
    body = summary_to_json(training())
    body["budgets"][""]["calibration_step_peaks_bytes"] = [990, "x"]
    body["peak_flops"] = 7
    del body["kind"]
    with pytest.raises(CollectorError) as refused:
        summary_from_json(body, "run/summary.json")
    assert str(refused.value).splitlines() == [
        "run/summary.json: no 'kind'",
        "run/summary.json.peak_flops: 7 is not of type PeakFlopsSummary",
        "run/summary.json.budgets..calibration_step_peaks_bytes[1]: 'x' is not of type int",
    ]


def test_a_flat_benchmark_missing_a_rounds_field_is_named():
    body = summary_to_json(micro())
    del body["benchmarks"]["test_a"]["count"]
    with pytest.raises(CollectorError, match=r"benchmarks\.test_a\.rounds: no 'count'"):
        summary_from_json(body, "summary.json")
