"""The engines benchmark's own parts (benchmarks/engines*.py): the spec it runs, the
order of the engines, what it reads from a summary, the error budget and the table."""

from __future__ import annotations

import dataclasses

import pytest
from engines import engine_order, engines_spec, main
from engines_budget import ErrorBudget, budget_misses, highest_within, within_line
from engines_results import NO_SAMPLES, LevelResult, Quantiles, level_result
from engines_tables import markdown_table, results_table
from rich.console import Console

from moeperf.collectors.quantiles import describe
from moeperf.collectors.serving_records import (
    MeasurementErrors,
    SelfWatchSummary,
    ServingSummary,
    WorkerSummary,
    empty_scenario,
)
from moeperf.specs import validate_spec

MS = 1e-3


@pytest.mark.parametrize("engine", ["asyncio", "locust"])
def test_the_spec_is_one_closed_loop_level_with_the_engine_and_no_jitter(engine):
    spec = validate_spec(engines_spec(engine, 64, duration_s=6.0, workers=2), "t").serving
    assert spec.load.engine == engine
    assert spec.load.mode == "concurrency" and spec.load.levels == [64]
    assert spec.load.workers == 2 and spec.load.duration_s == 6.0
    assert spec.target.synthetic is not None
    assert spec.target.synthetic.jitter == "none"
    assert spec.workload.output_tokens.dist == "fixed"
    assert not spec.export.live_metrics and not spec.export.scrape_target


def test_the_engines_alternate_which_runs_first():
    assert engine_order(0) == ("asyncio", "locust")
    assert engine_order(1) == ("locust", "asyncio")
    assert engine_order(2) == engine_order(0)


def _worker(index: int, lag_s: float, cpu: float) -> WorkerSummary:
    watch = SelfWatchSummary(lag_s / 2, lag_s, lag_s * 2, 100, cpu, 8.0)
    return WorkerSummary(index, "c16", 100, 100, 0, watch)


def _summary(**changes) -> ServingSummary:
    errors = MeasurementErrors(
        matched_requests=40,
        unmatched_requests=0,
        ttft=describe([0.1 * MS] * 99 + [1.5 * MS]),
        itl=describe([0.0] * 100),
        chunk=describe([0.2 * MS] * 100),
    )
    entry = dataclasses.replace(
        empty_scenario(),
        requests=42,
        ok=40,
        harness=(_worker(1, 0.5 * MS, 0.3), _worker(0, 0.2 * MS, 0.2)),
        harness_error_s=errors,
        **changes,
    )
    return ServingSummary(scenarios={"c16": entry})


def test_a_level_is_read_from_its_summary():
    result = level_result("locust", 16, "complete", _summary(), 9.5)
    assert (result.requests, result.ok, result.matched, result.unmatched) == (42, 40, 40, 0)
    assert result.ttft.p50 == pytest.approx(0.1 * MS)
    assert result.chunk.p99 == pytest.approx(0.2 * MS)
    assert result.loop_lag_p99_s == (0.2 * MS, 0.5 * MS)  # by worker index
    assert result.loop_lag_max_s == (0.4 * MS, 1.0 * MS)
    assert result.cpu_fraction == (0.2, 0.3)
    assert result.status == "ok" and not result.client_bound


def test_a_run_without_a_level_reads_as_invalid_without_samples():
    result = level_result("asyncio", 256, "aborted", ServingSummary(), 3.0)
    assert result.status == "invalid" and result.ttft == NO_SAMPLES
    assert budget_misses(result, ErrorBudget())


def _result(engine="asyncio", streams=16, ttft_p99=1.0, chunk_p99=1.0, **changes) -> LevelResult:
    base = LevelResult(
        engine=engine,
        streams=streams,
        run_status="complete",
        status="ok",
        status_reason=None,
        client_bottleneck=(),
        requests=100,
        ok=100,
        matched=100,
        unmatched=0,
        ttft=Quantiles(0.1 * MS, ttft_p99 * MS),
        itl=Quantiles(0.0, 0.5 * MS),
        chunk=Quantiles(0.1 * MS, chunk_p99 * MS),
        loop_lag_p99_s=(0.3 * MS,),
        loop_lag_max_s=(0.9 * MS,),
        cpu_fraction=(0.2,),
        wall_s=10.0,
    )
    return dataclasses.replace(base, **changes)


def test_the_budget_holds_within_its_bounds_and_says_why_not():
    budget = ErrorBudget(ttft_p99_s=2 * MS, chunk_p99_s=2 * MS)
    assert budget_misses(_result(ttft_p99=2.0, chunk_p99=2.0), budget) == []
    assert budget_misses(_result(ttft_p99=2.5), budget) == ["TTFT p99 2.50 ms > 2 ms"]
    assert budget_misses(_result(chunk_p99=3.0), budget) == ["chunk p99 3.00 ms > 2 ms"]
    bound = _result(status="invalid", client_bottleneck=("worker 0: event-loop lag",))
    assert budget_misses(bound, budget) == ["client-bound"]
    assert budget_misses(_result(unmatched=3), budget) == ["3 of 100 ok requests unmatched"]
    assert budget_misses(_result(ttft=NO_SAMPLES), budget) == ["no TTFT error samples"]
    # A wider budget is a flag away.
    assert budget_misses(_result(ttft_p99=2.5), ErrorBudget(ttft_p99_s=3 * MS)) == []


def test_the_highest_count_within_budget_is_per_engine():
    budget = ErrorBudget()
    results = [
        _result("asyncio", 1),
        _result("locust", 1),
        _result("asyncio", 16),
        _result("locust", 16, chunk_p99=4.0),
        _result("asyncio", 64),
        _result("locust", 64),
        _result("asyncio", 256, status="invalid", client_bottleneck=("lag",)),
        _result("locust", 256, status="invalid", client_bottleneck=("lag",)),
    ]
    assert highest_within(results, "asyncio", budget) == 64
    assert highest_within(results, "locust", budget) == 64
    line = within_line(results, "locust", budget)
    assert line.startswith("locust: 64 streams (over budget at 16: chunk p99 4.00 ms")
    assert "256: client-bound" in line
    assert highest_within([_result("asyncio", 1, ttft_p99=9.0)], "asyncio", budget) is None
    assert within_line([_result("asyncio", 1)], "asyncio", budget) == "asyncio: 1 stream"
    assert within_line([], "asyncio", budget) == "asyncio: none"


def test_the_table_has_a_row_per_count_and_both_engines_side_by_side():
    results = [_result("asyncio", 1), _result("locust", 1), _result("asyncio", 16)]
    table = results_table(results, ErrorBudget(), "title")
    assert table.row_count == 2
    assert len(table.columns) == 1 + 7 * 2
    console = Console(width=300, record=True)
    console.print(table)
    assert "not run" in console.export_text()  # locust at 16
    markdown = markdown_table(results, ErrorBudget()).splitlines()
    assert len(markdown) == 2 + 2
    assert "| 1 | 100 (100/0) | 100 (100/0) | 0.10/1.00 | 0.10/1.00 |" in markdown[2]


def test_bad_stream_counts_are_refused_before_anything_runs(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--streams", "1,x"])
    assert exit_info.value.code == 2
    assert "--streams" in capsys.readouterr().err


def test_a_bad_override_is_exit_2_before_anything_runs(capsys):
    assert main(["--streams", "1", "--set", "load.no_such_field=1"]) == 2
    assert "no_such_field" in capsys.readouterr().out
