"""The harness stress benchmark's own parts (benchmarks/harness_stress*.py): which
processes count as load workers, the peaks, the target's counters, the exactness checks."""

from __future__ import annotations

import dataclasses
import math
import multiprocessing as mp
import time

from harness_stress import stress_spec
from harness_stress_memory import MemoryPeaks, RssSampler, classify_process
from harness_stress_results import (
    CaseResult,
    marginal_bytes_per_request,
    per_thousand_mib,
    results_table,
)
from harness_stress_target import TargetCounts, target_counts
from prometheus_client import CollectorRegistry, generate_latest
from rich.console import Console

from moeperf.specs import validate_spec
from moeperf.targets.synthetic.metrics import SyntheticMetrics
from moeperf.targets.synthetic.slots import StreamSlots

MIB = 2**20


def test_spawned_load_workers_and_the_target_are_told_apart():
    spawn = ["python", "-c", "from multiprocessing.spawn import spawn_main; spawn_main("
             "tracker_fd=5, pipe_handle=7)", "--multiprocessing-fork"]  # fmt: skip
    target = ["python", "-m", "moeperf.targets.synthetic", "--host", "127.0.0.1", "--port", "0"]
    tracker = ["python", "-c", "from multiprocessing.resource_tracker import main;main(6)"]
    assert classify_process(spawn) == "worker"
    assert classify_process(target) == "target"
    assert classify_process(tracker) == "other"
    # Between fork and exec a child still shows its parent's command line.
    assert classify_process(["python", "benchmarks/harness_stress.py"]) == "other"


def test_peaks_keep_the_largest_sum_over_workers_and_the_largest_worker():
    peaks = MemoryPeaks()
    peaks.add(100, {1: 50, 2: 60})
    peaks.add(90, {1: 80})
    peaks.add(120, {})
    assert (peaks.parent, peaks.workers, peaks.worker_max, peaks.samples) == (120, 110, 80, 3)


def test_the_sampler_counts_a_spawned_worker_not_itself():
    context = mp.get_context("spawn")
    child = context.Process(target=time.sleep, args=(30,), daemon=True)
    child.start()
    try:
        sampler = RssSampler()
        deadline = time.monotonic() + 20
        workers = 0
        while workers == 0 and time.monotonic() < deadline:
            parent, workers = sampler.sample()
            time.sleep(0.05)
        assert parent > 0
        assert workers > 0
        assert sampler.peaks.worker_max == sampler.peaks.workers  # one worker
    finally:
        child.kill()
        child.join()


def test_target_counts_read_the_synthetic_targets_own_metrics():
    metrics = SyntheticMetrics(CollectorRegistry(), StreamSlots(0))
    metrics.faults.labels("error").inc(3)
    metrics.requests.labels("ok").inc(2)
    before = target_counts(generate_latest(metrics.registry).decode())
    metrics.faults.labels("error").inc(4)
    metrics.requests.labels("error").inc(4)
    after = target_counts(generate_latest(metrics.registry).decode())
    assert before.faults["error"] == 3 and before.requests["ok"] == 2
    delta = after.minus(before)
    assert delta.faults["error"] == 4
    assert delta.requests["error"] == 4 and delta.requests["ok"] == 0
    assert TargetCounts().minus(TargetCounts()) == TargetCounts({}, {})


def _case(**changes: object) -> CaseResult:
    case = CaseResult(
        factor=1, rate=40.0, run_status="complete", level_status="ok", client_bound=(),
        sent=100, offered=100, records=100, record_ids=100, ok=51,
        errors={"http_5xx": 49}, cancelled=0, target_ok=51, injected_errors=49,
        ground_truth_matched=41, ground_truth_unmatched=0,
        parent_start=150 * MIB, parent_level_start=200 * MIB,
        parent_level_end=201 * MIB, parent_peak=220 * MIB, parent_hwm=221 * MIB,
        workers_level_start=400 * MIB, workers_peak=404 * MIB, worker_max=203 * MIB,
        samples=10, level_s=8.3, wall_s=15.0,
    )  # fmt: skip
    return dataclasses.replace(case, **changes)  # type: ignore[arg-type]


def test_exact_when_every_request_is_stored_once_and_errors_are_the_faults():
    assert _case().exact
    assert not _case(records=99, record_ids=99).records_exact  # a record lost
    assert not _case(records=101).records_exact  # a request stored twice
    assert not _case(injected_errors=48).errors_exact  # an error the target did not inject
    assert not _case(errors={"http_5xx": 48, "timeout": 1}).errors_exact
    assert not _case(target_ok=52).errors_exact


def test_growth_per_thousand_requests_and_the_marginal_cost_of_a_request():
    low = _case()
    high = _case(factor=10, sent=1100, parent_peak=220 * MIB + 1000 * 4096)
    assert low.parent_growth == 20 * MIB and low.workers_growth == 4 * MIB
    assert per_thousand_mib(low.parent_growth, low.sent) == 200.0
    assert math.isnan(per_thousand_mib(MIB, 0))
    assert marginal_bytes_per_request(low, high, "parent_peak") == 4096
    assert math.isnan(marginal_bytes_per_request(low, low, "parent_peak"))


def test_the_table_puts_both_runs_side_by_side_with_their_ratio():
    high = _case(factor=10, rate=400.0, sent=1000, records=1000, record_ids=1000, ok=510,
                 errors={"http_5xx": 490}, target_ok=510, injected_errors=490,
                 parent_peak=230 * MIB, client_bound=("worker 0: event-loop lag",),
                 level_status="invalid", run_status="invalid")  # fmt: skip
    console = Console(record=True, width=120)
    console.print(results_table(_case(), high))
    text = console.export_text()
    assert "10x / 1x" in text
    assert "10.00" in text  # requests sent, 1,000 / 100
    assert "invalid / invalid" in text
    assert "NO" not in text
    assert "41 of 41" in text


def test_the_stress_spec_is_a_valid_serving_spec_that_fails_half_the_requests():
    spec = validate_spec(stress_spec(400.0, 8.0), "harness-stress").serving
    assert spec.target.synthetic.error_rate == 0.5
    assert spec.load.mode == "poisson" and spec.load.levels == [400.0]
    assert spec.load.workers == 2
