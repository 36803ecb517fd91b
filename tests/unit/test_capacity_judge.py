"""Judging a capacity probe, the [capacity] spec, and the search's record in summary.json."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from moeperf.collectors.capacity_records import CapacityProbe, CapacitySummary
from moeperf.collectors.records import RequestRecord
from moeperf.collectors.serving_records import NO_SLO, ScenarioSummary, ServingSummary, Slo
from moeperf.collectors.summary import summarize_requests
from moeperf.collectors.summary_json import summary_from_json, summary_to_json
from moeperf.collectors.tables import records_frame
from moeperf.specs import load_spec, validate_spec
from moeperf.suites.errors import SpecError
from moeperf.suites.serving.capacity.judge import criteria_text, judge_probe
from moeperf.suites.serving.capacity.run import probe_budget
from moeperf.suites.serving.mode_spec import CapacitySpec

MS = 1_000_000


def record(i: int, ttft_s: float) -> RequestRecord:
    """An ok request sent at i x 10 ms: its first token after ``ttft_s``, then 3 more
    10 ms apart."""
    send = i * 10 * MS
    first = send + int(ttft_s * 1e9)
    chunks = [first + k * 10 * MS for k in range(4)]
    return RequestRecord(
        request_id=f"r{i}", scenario="c=4", phase="measure", worker=0,
        intended_send_ns=send, send_ns=send, done_ns=chunks[-1] + MS, status="ok",
        chunk_ns=chunks, chunk_tokens=[1] * 4, first_token_ns=first,
        last_token_ns=chunks[-1], output_tokens=4,
    )  # fmt: skip


def level(ttft_s: list[float], slo: Slo = NO_SLO) -> ScenarioSummary:
    """The summary of one level whose ok requests had these TTFTs."""
    records = [record(i, t) for i, t in enumerate(ttft_s)]
    return summarize_requests(records_frame(records), slo).scenarios["c=4"]


def test_a_probe_holds_when_its_p99_is_within_the_limit_and_says_so_with_the_interval():
    entry = level(list(np.linspace(0.010, 0.020, 400)))
    verdict = judge_probe(entry, CapacitySpec(ttft_p99_s=0.025))
    assert verdict.passed is True
    assert verdict.reason.startswith("TTFT p99 0.0199 s <= 0.025 s [95% ")
    failing = judge_probe(entry, CapacitySpec(ttft_p99_s=0.015))
    assert failing.passed is False and "> 0.015 s" in failing.reason


def test_an_interval_spanning_the_limit_is_marginal_and_too_few_samples_are_said():
    entry = level(list(np.linspace(0.010, 0.020, 400)))
    p99 = entry.latency_s.ttft_s.at(0.99)
    assert p99 is not None and p99.ci_low is not None
    marginal = judge_probe(entry, CapacitySpec(ttft_p99_s=p99.ci_low + 1e-6))
    assert "marginal" in marginal.reason
    few = judge_probe(level([0.01] * 50), CapacitySpec(ttft_p99_s=1.0))
    assert few.passed is True and "too few samples for an interval" in few.reason


def test_every_criterion_must_hold_and_a_failed_or_client_bound_level_decides():
    slo = Slo(ttft_s=0.015)
    entry = level([0.01] * 300 + [0.02] * 100, slo)  # goodput ratio 0.75
    spec = CapacitySpec(ttft_p99_s=1.0, tpot_p99_s=1.0, min_goodput_ratio=0.9)
    verdict = judge_probe(entry, spec)
    assert verdict.passed is False
    assert "goodput ratio 0.750 < 0.9" in verdict.reason
    assert verdict.reason.count("<=") == 2  # both p99s held
    failed = dataclasses.replace(entry, status="failed", status_reason="timeout 300 of 400")
    assert judge_probe(failed, spec).passed is False
    bound = dataclasses.replace(entry, status="invalid", status_reason="client-bound: lag")
    assert judge_probe(bound, spec).passed is None
    assert criteria_text(spec) == ("TTFT p99 <= 1 s and TPOT p99 <= 1 s and goodput ratio >= 0.9")


def test_the_capacity_spec_needs_a_criterion_a_start_in_range_and_an_slo_for_goodput():
    with pytest.raises(ValueError, match="at least one criterion"):
        CapacitySpec()
    with pytest.raises(ValueError, match=r"capacity\.start"):
        CapacitySpec(ttft_p99_s=1.0, start=2000)
    with pytest.raises(SpecError, match="counts requests meeting \\[slo\\]"):
        validate_spec({"name": "c", "capacity": {"min_goodput_ratio": 0.9}}, "capacity.toml")
    shipped = load_spec("capacity").serving
    assert shipped.capacity is not None and shipped.load.max_requests == 400


def test_the_search_record_round_trips_through_summary_json():
    capacity = CapacitySummary(
        mode="concurrency",
        criteria="TTFT p99 <= 0.035 s",
        status="resolved",
        passed_level=4.0,
        failed_level=5.0,
        probes=(
            CapacityProbe(4.0, "c=4", True, "held", "bracket"),
            CapacityProbe(8.0, "c=8", False, "TTFT over", "bracket"),
            CapacityProbe(5.0, "c=5", None, "client-bound", "bisect"),
        ),
        ttft_p99_limit_s=0.035,
    )
    summary = ServingSummary(capacity=capacity)
    again = summary_from_json(summary_to_json(summary), "summary.json")
    assert again == summary
    assert capacity.answer() == "between 4 (held) and 5 (failed) streams"


def test_a_count_bound_probe_sends_its_warm_up_on_top_of_the_measured_count():
    spec = load_spec("capacity").serving  # 400 requests, 1 s warm-up, closed loop
    # 8 streams' first requests, and 1 s at 10 req/s with 20% to spare.
    assert probe_budget(spec, 8, 10.0) == 400 + 8 + 12
    assert probe_budget(spec, 4, 0.0) == 404  # the first probe: no rate known yet
    open_loop = load_spec("capacity", ["load.mode=poisson", "load.duration_s=30"]).serving
    assert probe_budget(open_loop, 8, 10.0) is None
