"""The capacity verdict of the gate: a capacity run's levels (held, failed) compared."""

from __future__ import annotations

import json

import numpy as np
import pytest

from moeperf.collectors.capacity_records import CapacitySummary
from moeperf.collectors.records import RequestRecord
from moeperf.collectors.serving_records import ServingSummary
from moeperf.collectors.store import RunStore
from moeperf.reports.gate import capacity_verdict, gate
from moeperf.reports.gate_output import format_gate, gate_command, unprobed_optional
from moeperf.reports.runs import load_run
from moeperf.reports.samples import MetricSamples
from moeperf.reports.verdicts import Verdict

S = 1_000_000_000
CRITERIA = "TTFT p99 <= 0.2 s and TPOT p99 <= 0.02 s"


def search(
    held: float | None,
    failed: float | None,
    status: str = "resolved",
    *,
    mode: str = "concurrency",
    criteria: str = CRITERIA,
) -> CapacitySummary:
    return CapacitySummary(mode, criteria, status, held, failed, ())  # type: ignore[arg-type]


def judged(candidate: CapacitySummary | None, baseline: CapacitySummary | None) -> Verdict:
    verdict = capacity_verdict(candidate, baseline)
    assert verdict is not None
    return verdict


BASELINE = search(32, 33)
BOTH = (
    "baseline: between 32 (held) and 33 (failed) streams; "
    "candidate: between {} (held) and {} (failed) streams"
)


def test_failing_a_level_the_baseline_held_is_a_regression():
    verdict = judged(search(24, 25), BASELINE)
    assert verdict.key == "capacity streams" and verdict.outcome == "regression"
    assert verdict.reason == (
        "the candidate failed at 25 streams, a level the baseline held (up to 32); "
        + BOTH.format(24, 25)
    )
    assert (verdict.baseline, verdict.baseline_failed) == (32, 33)
    assert (verdict.candidate, verdict.candidate_failed) == (24, 25)
    # Failing at exactly the level the baseline held is a regression too.
    assert judged(search(31, 32), BASELINE).outcome == "regression"
    # Even an unresolved search: every level failed down to min_level.
    below = judged(search(None, 4, "below_min"), BASELINE)
    assert (
        below.outcome == "regression" and "below 4 streams (no probed level held)" in below.reason
    )


def test_holding_a_level_the_baseline_failed_is_an_improvement():
    verdict = judged(search(40, 41), BASELINE)
    assert verdict.outcome == "improvement"
    assert verdict.reason.startswith("the candidate held 40 streams, a level the baseline failed")
    assert verdict.reason.endswith(BOTH.format(40, 41))
    assert judged(search(33, 34), BASELINE).outcome == "improvement"
    # Every level up to max_level held: at least that, past the baseline's failure.
    above = judged(search(64, None, "above_max"), BASELINE)
    assert above.outcome == "improvement" and "at least 64 streams" in above.reason


def test_the_same_interval_resolved_on_both_sides_is_no_change():
    verdict = judged(search(32, 33), BASELINE)
    assert verdict.outcome == "no change" and verdict.judged
    assert verdict.reason == (
        "both searches resolved and their intervals overlap; " + BOTH.format(32, 33)
    )
    rate = search(10.0, 12.5, mode="poisson")
    wider = judged(search(11.0, 12.0, mode="poisson"), rate)
    assert wider.key == "capacity requests/s" and wider.outcome == "no change"


@pytest.mark.parametrize("status", ["probe_limit", "stopped"])
def test_an_unresolved_search_is_inconclusive_naming_its_status(status):
    verdict = judged(search(28, 36, status), BASELINE)
    assert verdict.outcome == "inconclusive" and not verdict.judged
    assert verdict.reason.startswith(f"the candidate's search did not resolve (status {status})")
    both = judged(search(28, 36, status), search(28, 40, "probe_limit"))
    assert both.reason.startswith(
        "the baseline's search did not resolve (status probe_limit) and the candidate's "
        f"search did not resolve (status {status}); baseline: between 28 (held)"
    )


def test_differing_criteria_or_modes_are_inconclusive():
    other = "TTFT p99 <= 0.5 s"
    verdict = judged(search(8, 9, criteria=other), BASELINE)
    assert verdict.outcome == "inconclusive"
    assert verdict.reason.startswith(f"the SLO criteria differ: {CRITERIA} vs {other}; ")
    modes = judged(search(8, 9, mode="poisson"), BASELINE)
    assert modes.outcome == "inconclusive"
    assert modes.reason.startswith("the load modes differ: concurrency vs poisson; ")


def test_missing_from_the_candidate_fails_and_only_in_it_informs():
    missing = judged(None, BASELINE)
    assert missing.outcome == "missing from candidate" and missing.kind == "required"
    assert missing.reason == (
        "no capacity search in the candidate; baseline: between 32 (held) and 33 (failed) streams"
    )
    only = judged(BASELINE, None)
    assert only.outcome == "only in candidate"
    assert capacity_verdict(None, None) is None


def level_metric(level: str) -> MetricSamples:
    values = np.random.default_rng(1).lognormal(0, 0.05, 400)
    return MetricSamples(f"{level}/ttft_s", "p50", values, "lower", "latency", "s", level=level)


def test_the_gate_adds_the_capacity_verdict_as_a_required_metric_of_no_level():
    metrics = [level_metric("c=32"), level_metric("c=33")]
    assert all(v.name != "capacity" for v in gate(metrics, metrics).verdicts)
    passed = gate(metrics, metrics, baseline_capacity=BASELINE, candidate_capacity=BASELINE)
    assert passed.verdicts[-1].outcome == "no change" and passed.verdicts[-1].level == ""
    assert (len(passed.judged), len(passed.required), passed.status) == (3, 3, "pass")
    failed = gate(metrics, metrics, baseline_capacity=BASELINE, candidate_capacity=search(8, 9))
    assert failed.status == "fail" and failed.exit_code == 1
    assert [v.key for v in failed.regressions] == ["capacity streams"]
    text = format_gate(failed)
    assert "8 held, 9 failed" in text and "32 held, 33 failed" in text  # the table's cells
    assert (
        "REGRESSION capacity streams: the candidate failed at 9 streams, a level the baseline "
        "held (up to 32); " + BOTH.format(8, 9)
    ) in text
    assert text.endswith("FAIL: 1 regression(s); 3 of 3 metrics judged (exit 1)")
    # An unresolved search leaves the run's coverage to its levels' metrics.
    open_ended = gate(
        metrics, metrics, baseline_capacity=BASELINE, candidate_capacity=search(28, 36, "stopped")
    )
    assert open_ended.status == "pass" and len(open_ended.judged) == 2
    assert "capacity streams (inconclusive): the candidate's search" in format_gate(open_ended)
    missing = gate(metrics, metrics, baseline_capacity=BASELINE)
    assert missing.status == "fail"
    assert "MISSING FROM CANDIDATE capacity streams: no capacity search" in format_gate(missing)


def write_capacity_run(store: RunStore, capacity: CapacitySummary, seed: int) -> str:
    """A closed-loop level c=32 of 60 requests and the run's capacity search."""
    rng = np.random.default_rng(seed)
    with store.create("serving") as run:
        for i in range(60):
            send = i * S // 10
            first = send + int(rng.lognormal(np.log(0.05), 0.1) * S)
            chunks = [send + 1000, first, *(first + np.arange(1, 11) * S // 100).tolist()]
            run.append_request(
                RequestRecord(
                    request_id=f"r{i}",
                    scenario="c=32",
                    phase="measure",
                    worker=0,
                    intended_send_ns=send,
                    send_ns=send,
                    done_ns=chunks[-1] + 1000,
                    status="ok",
                    chunk_ns=chunks,
                    chunk_tokens=[0] + [1] * 11,
                    first_token_ns=first,
                    last_token_ns=chunks[-1],
                    output_tokens=11,
                )
            )
        run.write_summary(ServingSummary(capacity=capacity))
    return run.run_id


def test_gate_command_gates_the_capacity_of_a_run(tmp_path):
    store = RunStore(tmp_path)
    baseline = load_run(store, write_capacity_run(store, BASELINE, seed=1))
    candidate_id = write_capacity_run(store, search(16, 17), seed=2)
    lines: list[str] = []
    assert gate_command(candidate_id, baseline, tmp_path, out=lines.append) == 1
    assert "REGRESSION capacity streams: the candidate failed at 17 streams" in lines[0]
    body = json.loads((tmp_path / candidate_id / "gate.json").read_text())
    verdict = body["verdicts"][-1]
    assert verdict["key"] == "capacity streams" and verdict["outcome"] == "regression"
    assert verdict["level"] == "" and verdict["metric_class"] == "capacity"
    assert (verdict["baseline"], verdict["baseline_failed"]) == (32, 33)
    assert (verdict["candidate"], verdict["candidate_failed"]) == (16, 17)
    assert verdict["ratio"] is None and verdict["p_value"] is None
    assert body["counts"]["regression"] == 1 and "capacity (a capacity run's" in body["rule"]


def test_levels_only_the_baseline_probed_are_optional_not_missing():
    """Two searches probe different levels: the baseline's c=33 was never probed by a
    candidate whose capacity moved, which is no failure of the candidate."""
    rng = np.random.default_rng(0)

    def ttft(level: str) -> MetricSamples:
        values = rng.normal(1.0, 0.05, 400)
        return MetricSamples(f"{level}/ttft_s", "p50", values, "lower", "latency", "s", level=level)

    baseline = [ttft("c=32"), ttft("c=33")]
    candidate = [ttft("c=32"), ttft("c=40")]
    marked = unprobed_optional(baseline, candidate)
    assert [(m.level, m.kind) for m in marked] == [("c=32", "required"), ("c=33", "optional")]
    result = gate(
        candidate, marked, baseline_capacity=search(32, 33), candidate_capacity=search(40, 41)
    )
    outcomes = {v.key: v.outcome for v in result.verdicts}
    assert outcomes["c=33/ttft_s p50"] == "optional, missing from candidate"
    assert outcomes["capacity streams"] == "improvement"
    assert result.status == "pass", result.coverage_problem


def test_each_prompt_lengths_fit_is_judged_by_the_same_rule():
    fits = {
        "in=4064 fit": (search(2, 3), search(1, 2)),  # the candidate fits fewer: regression
        "in=1024 fit": (search(7, 8), search(7, 8)),
        "in=2040 fit": (search(3, 4), None),
    }
    result = gate([], [], fits=fits)
    outcomes = {v.key: v.outcome for v in result.verdicts}
    assert outcomes == {
        "in=4064 fit streams": "regression",
        "in=1024 fit streams": "no change",
        "in=2040 fit streams": "missing from candidate",
    }
    missing = next(v for v in result.verdicts if v.key == "in=2040 fit streams")
    assert missing.reason.startswith("no fit search at this length in the candidate")
    assert result.status == "fail"
