"""The report's workload blocks: prefix cache, reuse pairs, turns, trace replay, repeats."""

from __future__ import annotations

import dataclasses
import html

import pandas as pd
import pytest

from moeperf.collectors.quantiles import Described, QuantileEstimate
from moeperf.collectors.records import RequestRecord
from moeperf.collectors.serving_records import ScenarioSummary, ServingSummary, empty_scenario
from moeperf.collectors.tables import SCHEMAS, records_frame, table_to_frame
from moeperf.collectors.target_counters import NOT_AVAILABLE, TargetCounters
from moeperf.collectors.workload_records import RepeatLevel, RepeatMetric, TraceReplay, TurnSummary
from moeperf.collectors.workload_summary import repeat_levels
from moeperf.reports.appendix import appendix_html
from moeperf.reports.figures.trace_replay import BIN_S, MAX_BINS, arrival_series, bin_width
from moeperf.reports.figures.turns import turns_chart
from moeperf.reports.render import Chart, Section, Table, render_page
from moeperf.reports.workload_blocks import (
    NOT_ASKED,
    cache_table,
    hit_rate,
    reuse_table,
    workload_blocks,
)

MS = 1_000_000
XSS = "<script>alert(1)</script>"
NO_REQUESTS = table_to_frame("requests", SCHEMAS["requests"].empty_table())


def ttft(p50_s: float, ci: tuple[float, float] | None = None) -> Described:
    low, high = ci if ci is not None else (None, None)
    return Described(100, p50_s, (QuantileEstimate(0.5, p50_s, low, high),))


def level(p50_s: float | None = None, **fields) -> ScenarioSummary:
    entry = empty_scenario()
    if p50_s is not None:
        latency = dataclasses.replace(entry.latency_s, ttft_s=ttft(p50_s, (p50_s * 0.9, p50_s)))
        entry = dataclasses.replace(entry, latency_s=latency)
    return dataclasses.replace(entry, **fields)


def counters(ratio: float | None, queries: float | None) -> TargetCounters:
    return TargetCounters(
        dialect="reference",
        gauge_scrapes=3,
        prefix_cache_queries=queries,
        prefix_cache_hits=None if ratio is None or queries is None else ratio * queries,
        prefix_cache_hit_ratio=ratio,
    )


def frame(block: Chart | Table | None) -> pd.DataFrame:
    assert isinstance(block, Table)
    return block.frame


def test_a_plain_run_gets_no_workload_block():
    scenarios = {"c=1": level(0.05), "c=4": level(0.08)}
    assert workload_blocks(ServingSummary(scenarios=scenarios), NO_REQUESTS) == []


def test_the_cache_table_comes_with_a_reset_or_prefix_counters():
    reset = {
        "c=1": level(0.05, cache_reset_done=True, cache_reset="POST /reset_prefix_cache: 200"),
        "c=4": level(
            0.08, cache_reset_done=False, cache_reset="not available from this target (404)"
        ),
    }
    table = cache_table(reset)
    assert frame(table)["cache before the level"].tolist() == [
        "reset (POST /reset_prefix_cache: 200)",
        "not available from this target (404)",
    ]
    assert frame(table)["TTFT p50 ms"].tolist() == pytest.approx([50.0, 80.0])
    assert frame(table)["TTFT p50 95% CI ms"].tolist() == ["45.0 - 50.0", "72.0 - 80.0"]
    assert frame(table)["prefix-cache hit rate"].tolist() == ["not scraped"] * 2
    counted = {
        "a": level(0.05, target_counters=counters(0.25, 400.0)),
        "b": level(0.05, target_counters=counters(None, 0.0)),
        "c": level(0.05, target_counters=counters(None, None)),
    }
    table = cache_table(counted)
    assert frame(table)["prefix-cache hit rate"].tolist() == ["25.0%", "no lookups", NOT_AVAILABLE]
    assert frame(table)["cache before the level"].tolist() == [NOT_ASKED] * 3
    # Counters without any prefix-cache series, and no reset asked: no table.
    assert cache_table({"c=1": level(0.05, target_counters=counters(None, None))}) is None


def test_the_reuse_table_pairs_each_level_with_its_control_and_divides():
    scenarios = {
        # Each scenario's level and repeat as the runner writes them: pairs are matched by
        # these fields, not by the names.
        "c=4": level(0.030, level=4.0, target_counters=counters(0.75, 1000.0)),
        "c=4 unique": level(0.120, level=4.0, unique=True, target_counters=counters(0.0, 1000.0)),
        "c=8 #2": level(0.050, level=8.0, repeat=2),
        "c=8 unique #2": level(0.100, level=8.0, repeat=2, unique=True),
        "c=16 unique": level(0.100, level=16.0, unique=True),  # its level did not run: no pair
    }
    rows = frame(reuse_table(scenarios))
    assert rows["level"].tolist() == ["c=4", "c=8 #2"]
    assert rows["ratio (with / without)"].tolist() == pytest.approx([0.25, 0.5])
    assert rows["TTFT p50 with ms"].tolist() == pytest.approx([30.0, 50.0])
    assert rows["TTFT p50 without ms"].tolist() == pytest.approx([120.0, 100.0])
    assert rows["hit rate with"].tolist() == ["75.0%", "not scraped"]
    assert rows["hit rate without"].tolist() == ["0.0%", "not scraped"]
    # A control without TTFT samples: no ratio, never a made-up one.
    scenarios["c=4 unique"] = level(level=4.0, unique=True)
    assert pd.isna(frame(reuse_table(scenarios))["ratio (with / without)"].iloc[0])
    assert reuse_table({"c=4": level(0.03)}) is None


def turn(k: int, p50_s: float, cached: float | None, requests: int = 10) -> TurnSummary:
    return TurnSummary(k, requests, ttft(p50_s, (p50_s - 0.001, p50_s + 0.002)), 100.0 * k, cached)


def test_the_turns_chart_has_a_line_per_scenario_with_its_ttft_and_cached_share():
    scenarios = {
        "conv c=2": level(turns=(turn(1, 0.040, 0.0), turn(2, 0.020, 0.5), turn(3, 0.025, 0.6))),
        "plain": level(0.01),
        XSS: level(turns=(turn(1, 0.050, None), turn(2, 0.060, None))),
    }
    fig = turns_chart(scenarios)
    top = [t for t in fig.data if t.yaxis == "y"]
    bottom = [t for t in fig.data if t.yaxis == "y2"]
    assert [t.name for t in top] == ["conv c=2", html.escape(XSS, quote=False)]
    assert list(top[0].x) == [1, 2, 3]
    assert list(top[0].y) == pytest.approx([40.0, 20.0, 25.0])
    assert list(top[0].error_y.array) == pytest.approx([2.0, 2.0, 2.0])
    assert list(top[0].error_y.arrayminus) == pytest.approx([1.0, 1.0, 1.0])
    assert list(top[1].y) == pytest.approx([50.0, 60.0])
    assert list(bottom[0].y) == pytest.approx([0.0, 0.5, 0.6])
    assert list(bottom[1].y) == [None, None]
    assert XSS not in str(fig.to_plotly_json())
    blocks = workload_blocks(ServingSummary(scenarios=scenarios), NO_REQUESTS)
    assert [type(b) for b in blocks] == [Table, Chart]
    rows = frame(blocks[0])
    assert rows["scenario"].tolist() == ["conv c=2"] * 3 + [XSS] * 2
    assert rows["cached (server usage)"].tolist()[2:] == ["60.0%", NOT_AVAILABLE, NOT_AVAILABLE]
    assert isinstance(blocks[1], Chart) and blocks[1].drawn_by == ("turns",)


def trace_record(i: int, scenario: str, intended_ms: float, lag_ms: float, sent: bool = True):
    intended = 5_000 * MS + int(intended_ms * MS)  # the level starts 5 s after the anchor
    send = intended + int(lag_ms * MS) if sent else 0
    return RequestRecord(
        request_id=f"{scenario}-{i}",
        scenario=scenario,
        phase="measure",
        worker=0,
        intended_send_ns=intended,
        send_ns=send,
        done_ns=send + 30 * MS,
        status="ok" if sent else "error",
        chunk_ns=[send + 10 * MS] if sent else [],
        chunk_tokens=[1] if sent else [],
        first_token_ns=send + 10 * MS if sent else None,
        last_token_ns=send + 10 * MS if sent else None,
        output_tokens=1 if sent else None,
    )


def replay(sent: int, trace_requests: int) -> TraceReplay:
    return TraceReplay(trace_requests, sent, ttft(0.002), 0.8, 2.0)


def test_the_trace_chart_counts_the_intended_and_the_actual_sends():
    # Level A: 6 requests at 0, 0.1, 0.6, 0.7, 1.2, 1.3 s, the last two sent 500 ms late,
    # one of them (the last) never sent at all; level B: 3 on time.
    a = [trace_record(i, "trace x2", t, 0.5) for i, t in enumerate([0, 100, 600, 700])]
    a += [trace_record(4, "trace x2", 1200, 500), trace_record(5, "trace x2", 1300, 0, False)]
    b = [trace_record(i, XSS, t, 0.1) for i, t in enumerate([0, 50, 900])]
    other = [trace_record(0, "c=1", 0, 0)]
    requests = records_frame(a + b + other)
    series = arrival_series(requests, ["trace x2", XSS])
    assert [s.scenario for s in series] == ["trace x2", XSS]
    first = series[0]
    assert first.bin_s == BIN_S
    assert first.intended.tolist() == [2, 2, 2, 0]
    assert first.actual.tolist() == [2, 2, 0, 1]
    assert first.starts_s.tolist() == [0.0, 0.5, 1.0, 1.5]
    assert first.lag_ms.tolist() == pytest.approx([0.5, 0.5, 0.5, 0.5, 500.0])
    assert series[1].intended.sum() == 3 and series[1].actual.sum() == 3
    scenarios = {
        "c=1": level(0.01),
        "trace x2": level(0.02, trace_replay=replay(5, 6)),
        XSS: level(0.02, trace_replay=replay(3, 3)),
    }
    blocks = workload_blocks(ServingSummary(scenarios=scenarios), requests)
    assert [type(b) for b in blocks] == [Table, Chart]
    rows = frame(blocks[0])
    assert rows["scenario"].tolist() == ["trace x2", XSS]
    assert rows["on time"].tolist() == ["80.0%", "80.0%"]
    assert rows["send lag p50 ms"].tolist() == pytest.approx([2.0, 2.0])
    chart = blocks[1]
    assert isinstance(chart, Chart) and chart.drawn_by == ("trace_replay",)
    counts = {t.name: sum(t.y) for t in chart.figure.data if t.xaxis == "x"}
    escaped = html.escape(XSS, quote=False)
    assert counts == {
        "trace x2: trace": 6,
        "trace x2: sent": 5,
        f"{escaped}: trace": 3,
        f"{escaped}: sent": 3,
    }
    lags = [t for t in chart.figure.data if t.xaxis == "x2"]
    assert [len(t.x) for t in lags] == [5, 3]
    assert lags[0].y[-1] == pytest.approx(1.0)


def test_a_long_trace_gets_wider_bins():
    assert bin_width(10.0) == BIN_S
    assert bin_width(BIN_S * MAX_BINS * 3.5) == BIN_S * 4


def metric(name: str, values: tuple[float | None, ...], within: float | None) -> RepeatMetric:
    return RepeatMetric(name, values, 0.11, 0.09, 0.13, within, 2.5 if within else None)


def test_the_repeats_table_shows_each_metric_scaled():
    levels = (
        RepeatLevel(
            "c=4",
            ("c=4 #1", "c=4 #2"),
            (metric("ttft_p50_s", (0.1, 0.12), 0.002), metric("output_tok_s", (50.0, None), None)),
        ),
    )
    blocks = workload_blocks(ServingSummary(scenarios={}, repeats=levels), NO_REQUESTS)
    assert len(blocks) == 1
    rows = frame(blocks[0])
    assert rows["metric"].tolist() == ["TTFT p50 (ms)", "output (tok/s)"]
    assert rows["per repeat"].tolist() == ["100.00, 120.00", "50.00, -"]
    assert rows["mean"].tolist() == pytest.approx([110.0, 0.11])
    assert rows["between repeats (95%)"].tolist() == ["90.00 - 130.00", "0.09 - 0.13"]
    assert rows["within one run ±"].iloc[0] == pytest.approx(2.0)
    assert pd.isna(rows["within one run ±"].iloc[1])
    assert "standard error one repeat's CI implies" in blocks[0].caption
    # From the summary's own computation: one row per metric of the level.
    computed = repeat_levels({"c=1 #1": level(0.05), "c=1 #2": level(0.06)})
    blocks = workload_blocks(ServingSummary(scenarios={}, repeats=computed), NO_REQUESTS)
    assert len(frame(blocks[0])) == 5


def test_scenario_names_are_escaped_in_the_page():
    scenarios = {
        XSS: level(
            0.03,
            cache_reset_done=False,
            cache_reset=XSS,
            target_counters=counters(0.5, 10.0),
            turns=(turn(1, 0.03, 0.1),),
            trace_replay=replay(1, 1),
        ),
        XSS + " unique": level(0.06, unique=True),
    }
    requests = records_frame([trace_record(0, XSS, 0, 1)])
    summary = ServingSummary(scenarios=scenarios, repeats=repeat_levels({}))
    blocks = workload_blocks(summary, requests)
    assert len(blocks) == 6  # cache, reuse, turns table and chart, trace table and chart
    section = Section("run", "run", blocks=blocks)
    page = render_page("t", [section], appendix_html([section]))
    assert XSS not in page
    assert f"<td>{html.escape(XSS)}</td>" in page
    assert "<h4><code>collectors.workload_summary</code></h4>" in page
    assert "<h4><code>reports.figures.turns</code></h4>" in page
    assert "<h4><code>reports.figures.trace_replay</code></h4>" in page


def test_hit_rate_wording_matches_the_counters_table():
    assert hit_rate(level(0.01)) == "not scraped"
    assert hit_rate(level(0.01, target_counters=counters(0.123, 8.0))) == "12.3%"
