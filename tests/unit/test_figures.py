"""Figures from hand-built frames: what each draws, and the numbers behind it."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pandas as pd
import pytest

from moeperf.collectors.quantiles import Described, QuantileEstimate, describe
from moeperf.collectors.records import StepRecord
from moeperf.collectors.serving_records import ScenarioSummary, empty_scenario
from moeperf.collectors.tables import rows_to_table, table_to_frame
from moeperf.reports.figures.baseline_trend import baseline_trend
from moeperf.reports.figures.cdf import cdf_curves, cdf_points, latency_cdf
from moeperf.reports.figures.concurrency import concurrency_curve, levels_frame, pareto_front
from moeperf.reports.figures.errors import error_bars, error_counts
from moeperf.reports.figures.expert_load import expert_load_heatmap, expert_load_matrix
from moeperf.reports.figures.forest import excludes_null, forest_plot
from moeperf.reports.figures.memory import peak_memory
from moeperf.reports.figures.micro import micro_distributions
from moeperf.reports.figures.percentiles import percentile_frame, percentile_table
from moeperf.reports.figures.prefill import prefill_frame, prefill_throughput
from moeperf.reports.figures.steps import event_table, step_table
from moeperf.reports.figures.text import plotly_text
from moeperf.reports.figures.timeline import scenario_starts, timeline, timeline_frame
from moeperf.reports.figures.training_events import training_timeline
from moeperf.reports.figures.training_throughput import policy_throughput, policy_throughput_frame

S = 1_000_000_000
XSS = '<script>alert(1)</script>"><img src=x onerror=alert(1)>'


# --- Pareto front and the concurrency curve ---------------------------------------------


def test_pareto_front_on_a_known_set():
    #              A     B     C     D    E     F (NaN)  G (= B)
    throughput = [100, 200, 150, 50, 200, np.nan, 200]
    latency = [10, 20, 30, 5, 25, 1, 20]
    front = pareto_front(throughput, latency)
    # C is beaten by B (more throughput, less latency); E by B (same throughput, slower);
    # F has no throughput; B and G tie, and a tie dominates neither.
    assert front.tolist() == [True, True, False, True, False, False, True]


def test_pareto_front_of_a_monotone_tradeoff_keeps_every_point():
    assert pareto_front([1, 2, 3, 4], [1, 2, 3, 4]).all()
    assert pareto_front([1, 2, 3, 4], [4, 3, 2, 1]).tolist() == [False, False, False, True]


def _described(p50: float, p99: float) -> Described:
    return Described(
        count=100,
        mean=p50,
        quantiles=(
            QuantileEstimate(q=0.5, value=p50, ci_low=p50 * 0.9, ci_high=p50 * 1.1),
            QuantileEstimate(q=0.9, value=p99 * 0.8, ci_low=None, ci_high=None),
            QuantileEstimate(q=0.99, value=p99, ci_low=None, ci_high=None),
        ),
    )


def summary_scenarios() -> dict[str, ScenarioSummary]:
    levels = {"c=1": (100, 0.05, 0.01), "c=4": (380, 0.06, 0.011), "c=16": (1200, 0.09, 0.015)}
    levels["c=64"] = (1100, 0.4, 0.03)  # past saturation: slower and no faster
    empty = empty_scenario()
    return {
        name: dataclasses.replace(
            empty,
            ok=100,
            output_throughput_tok_s=tok_s,
            latency_s=dataclasses.replace(
                empty.latency_s,
                ttft_s=_described(ttft, ttft * 2),
                tpot_s=_described(tpot, tpot * 2),
            ),
        )
        for name, (tok_s, ttft, tpot) in levels.items()
    }


def test_concurrency_curve_has_one_point_per_level_and_marks_the_front():
    levels = levels_frame(summary_scenarios())
    assert levels["scenario"].tolist() == ["c=1", "c=4", "c=16", "c=64"]
    assert levels["ttft_p99_s"].tolist() == pytest.approx([0.1, 0.12, 0.18, 0.8])
    fig = concurrency_curve(levels)
    lines = [t for t in fig.data if not t.name.endswith("Pareto front")]
    fronts = [t for t in fig.data if t.name.endswith("Pareto front")]
    assert [t.name for t in lines] == ["TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99"]
    assert all(len(t.x) == 4 for t in lines)
    # c=64 is dominated by c=16 (less throughput, more latency): three front points each.
    assert all(len(t.x) == 3 for t in fronts)
    assert 1100 not in list(fronts[0].x)


def test_concurrency_curve_escapes_scenario_names():
    scenarios = summary_scenarios()
    scenarios[XSS] = scenarios.pop("c=64")
    fig = concurrency_curve(levels_frame(scenarios))
    assert plotly_text(XSS) in fig.data[0].text
    assert XSS not in str(fig.to_plotly_json())


# --- CDFs --------------------------------------------------------------------------------


def test_cdf_of_few_samples_keeps_them_all():
    x, p = cdf_points([0.3, np.nan, 0.1, 0.2, np.inf])
    assert x.tolist() == [0.1, 0.2, 0.3]
    assert p.tolist() == pytest.approx([1 / 3, 2 / 3, 1.0])


def test_cdf_downsampling_is_bounded_and_keeps_real_samples_and_the_tail():
    rng = np.random.default_rng(1)
    values = rng.lognormal(-4, 0.5, 1_000_000)
    x, p = cdf_points(values, max_points=2000)
    assert 1000 < len(x) <= 2000
    assert x[0] == values.min() and x[-1] == values.max() and p[-1] == 1.0
    assert np.all(np.diff(x) >= 0) and np.all(np.diff(p) > 0)
    assert np.isin(x, values).all()  # order statistics, never interpolated
    ordered = np.sort(values)
    ranks = np.round(p * len(values)).astype(int) - 1
    assert np.array_equal(x, ordered[ranks])  # the k-th smallest is drawn at (k + 1) / n
    # The tail is resolved: from p90 to p99.99 each step shrinks 1 - p by under 5%
    # (evenly spaced ranks alone step by 1/1500, past p99.9 in a single step).
    tail = p[(p >= 0.9) & (p <= 0.9999)]
    assert np.all(np.diff(tail) / (1 - tail[:-1]) < 0.05)
    assert cdf_points([])[0].size == 0


def test_cdf_curves_per_scenario_and_the_figure():
    frame = pd.DataFrame(
        {
            "scenario": ["c=1"] * 3 + [XSS] * 5000,
            "ttft_s": [0.01, 0.02, np.nan, *list(np.linspace(0.01, 0.5, 5000))],
        }
    )
    curves = cdf_curves(frame, "ttft_s", max_points=500)
    sizes = curves.groupby("scenario", sort=False).size().tolist()
    assert sizes[0] == 2 and 300 < sizes[1] <= 500
    assert curves.groupby("scenario", sort=False)["samples"].first().tolist() == [2, 5000]
    fig = latency_cdf(curves, "TTFT")
    assert len(fig.data) == 2
    assert fig.data[1].name == plotly_text(f"{XSS} (n=5,000)")
    assert fig.data[0].x.tolist() == pytest.approx([10.0, 20.0])  # milliseconds
    assert latency_cdf(cdf_curves(frame.iloc[:0], "ttft_s"), "TTFT").layout.annotations


# --- percentile table ----------------------------------------------------------------------


def test_percentile_table_comes_from_describe_with_counts_and_intervals():
    latency = [
        ("c=1", "TTFT", describe(np.linspace(0.01, 0.02, 500))),
        ("c=1", "ITL", describe([0.01] * 5)),
    ]
    frame = percentile_frame(latency)
    assert frame[["scenario", "metric", "count"]].values.tolist() == [
        ["c=1", "TTFT", 500],
        ["c=1", "ITL", 5],
    ]
    ttft = frame.iloc[0]
    assert ttft["p99_s"] == pytest.approx(np.quantile(np.linspace(0.01, 0.02, 500), 0.99))
    assert ttft["p99_low_s"] <= ttft["p99_s"] <= ttft["p99_high_s"]
    cells = percentile_table(frame).data[0].cells.values
    assert list(cells[2]) == ["500", "5"]
    assert cells[5][1] == "10.00 (too few samples)"  # 5 samples: no interval for p99


# --- timeline and prefill --------------------------------------------------------------------


def test_timeline_in_flight_is_the_exact_time_weighted_mean():
    requests = pd.DataFrame(
        {
            "intended_send_ns": [0, 1 * S, int(2.5 * S)],
            "send_ns": [0, 1 * S, int(2.5 * S)],
            "done_ns": [2 * S, 3 * S, 3 * S],
            "status": ["ok", "ok", "error"],
            "scenario": ["c=1", "c=1", "c=2"],
        }
    )
    ttft = pd.Series([0.1, 0.3, np.nan])
    frame = timeline_frame(requests, ttft)
    assert frame["t_s"].tolist() == [0, 1, 2]
    # [0,1): one request; [1,2): two; [2,3): the second plus the third's last half second.
    assert frame["in_flight"].tolist() == pytest.approx([1.0, 2.0, 1.5])
    assert frame["sent"].tolist() == [1, 1, 1]
    assert frame["ttft_p50_s"].tolist()[:2] == pytest.approx([0.1, 0.3])
    assert math.isnan(frame["ttft_p50_s"].iloc[2])  # the error has no TTFT
    starts = scenario_starts(requests)
    assert starts.values.tolist() == [["c=1", 0.0], ["c=2", 2.5]]
    fig = timeline(frame, starts)
    assert len(fig.data) == 3
    assert [a.text for a in fig.layout.annotations] == ["c=1", "c=2"]


def test_timeline_bins_widen_for_long_runs():
    hours = 10 * 3600 * S
    requests = pd.DataFrame(
        {
            "intended_send_ns": [0, hours],
            "send_ns": [0, hours],
            "done_ns": [S, hours + S],
            "status": ["ok", "ok"],
        }
    )
    frame = timeline_frame(requests, pd.Series([0.1, 0.1]), max_bins=600)
    assert 590 <= len(frame) <= 600
    assert frame["width_s"].iloc[0] == 61  # 36,001 s / 600 bins, rounded up to whole seconds


def test_prefill_throughput_is_prompt_tokens_over_ttft_per_bin():
    prompt = pd.Series([100.0, 100.0, 1000.0, 1000.0, np.nan])
    ttft = pd.Series([0.1, 0.2, 0.5, 0.5, 0.1])
    scenario = pd.Series(["c=1"] * 5)
    frame = prefill_frame(scenario, prompt, ttft, bins=2)
    assert frame["requests"].tolist() == [2, 2]
    assert frame["p50"].tolist() == pytest.approx([750.0, 2000.0])
    assert frame["prompt_low"].iloc[0] == 100
    fig = prefill_throughput(frame)
    assert len(fig.data) == 1 and len(fig.data[0].x) == 2


# --- forest plot and baseline trend ------------------------------------------------------------


def effects() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "metric": ["c=16/tpot_s p50", "c=16/ttft_s p99", XSS],
            "effect": [0.72, 1.01, 1.2],
            "ci_low": [0.69, 0.95, 1.05],
            "ci_high": [0.75, 1.08, 1.4],
            "baseline": ["MTP off"] * 3,
            "candidate": ["MTP on"] * 3,
        }
    )


def test_forest_plot_draws_each_effect_with_its_interval():
    frame = effects()
    assert excludes_null(frame).tolist() == [True, False, True]
    fig = forest_plot(frame)
    trace = fig.data[0]
    assert list(trace.y) == ["c=16/tpot_s p50", "c=16/ttft_s p99", plotly_text(XSS)]
    assert list(trace.error_x.array) == pytest.approx([0.03, 0.07, 0.2])
    assert list(trace.error_x.arrayminus) == pytest.approx([0.03, 0.06, 0.15])
    assert list(trace.marker.symbol) == ["square", "square-open", "square"]
    assert "MTP on vs MTP off" in fig.layout.title.text
    with pytest.raises(ValueError, match="ci_high"):
        forest_plot(frame.drop(columns="ci_high"))


def test_baseline_trend_orders_versions_by_creation_per_metric():
    frame = pd.DataFrame(
        {
            "version": ["v2", "v1", "v2", "v1", "v3"],
            "created": ["2026-02-01", "2026-01-01", "2026-02-01", "2026-01-01", "2026-03-01"],
            "metric": ["ttft p99", "ttft p99", "tok/s", "tok/s", "ttft p99"],
            "value": [0.2, 0.25, 900, 1000, 0.18],
            "ci_low": [0.18, 0.2, 880, 950, 0.17],
            "ci_high": [0.22, 0.3, 920, 1050, 0.2],
        }
    )
    fig = baseline_trend(frame)
    assert len(fig.data) == 2
    ttft, tok = fig.data
    assert list(ttft.x) == ["v1", "v2", "v3"] and list(ttft.y) == [0.25, 0.2, 0.18]
    assert list(tok.y)[:2] == [1000, 900] and math.isnan(tok.y[2])


# --- errors and micro -------------------------------------------------------------------------


def test_error_counts_by_type_with_an_escaped_example():
    requests = pd.DataFrame(
        {
            "request_id": ["a", "b", "c", "d", "e"],
            "scenario": ["c=1", "c=1", "c=1", "c=4", "c=4"],
            "status": ["ok", "error", "error", "cancelled", "error"],
            "error_type": [None, "http_5xx", "http_5xx", None, "timeout"],
            "error_message": [None, XSS, "other", None, None],
            "http_status": [200, 503, 503, None, None],
        }
    )
    counts = error_counts(requests)
    assert counts[["scenario", "error_type", "requests"]].values.tolist() == [
        ["c=1", "http_5xx", 2],
        ["c=4", "cancelled", 1],
        ["c=4", "timeout", 1],
    ]
    assert counts["example_message"].iloc[0] == XSS  # raw here; render escapes it
    assert counts["http_status"].iloc[0] == "503"
    assert len(error_bars(counts).data) == 3


def test_micro_distributions_one_panel_per_metric():
    samples = pd.DataFrame(
        {
            "metric": ["parse"] * 3 + ["route"] * 2,
            "value": [1.0, 1.1, 0.9, 5.0, 5.5],
            "unit": ["s"] * 5,
            "direction": ["lower"] * 5,
            "scenario": ["a", "a", "b", "", ""],
        }
    )
    fig = micro_distributions(samples)
    assert [t.name for t in fig.data] == ["a", "b", "route"]
    titles = [a.text for a in fig.layout.annotations]
    assert titles == ["parse (s; lower is better; n=3)", "route (s; lower is better; n=2)"]


# --- training ------------------------------------------------------------------------------


def step(step: int, rank: int, policy: str, **kw: Any) -> StepRecord:
    start = step * 2 * S
    base: dict[str, Any] = dict(
        step=step,
        rank=rank,
        start_ns=start + rank * 1000,
        end_ns=start + S + rank * 1000,
        tokens=1000,
        scenario=policy,
        mfu=0.4 + 0.1 * rank,
        peak_memory_bytes=(10 + rank) * 2**30,
        tokens_per_expert=[[10, 30], [20, 20]],
    )
    base.update(kw)
    return StepRecord(**base)


def training_records() -> list[StepRecord]:
    restart = {"kind": "restart", "lost_s": 30.0}
    return [
        step(0, 0, "static"),
        step(0, 1, "static"),
        # Both ranks report the same restart: 30 s lost once, not 60.
        step(1, 0, "static", events=[restart]),
        step(1, 1, "static", events=[restart, {"kind": "oom", "at_ns": 3 * S, "bytes": 1}]),
        step(2, 0, XSS, tokens=4000, tokens_per_expert=[[40, 0], [0, 40]]),
    ]


@pytest.fixture(params=["in-memory", "stored"])
def steps(request) -> pd.DataFrame:
    rows = [r.to_dict() for r in training_records()]
    if request.param == "in-memory":
        return pd.DataFrame(rows)
    return table_to_frame("steps", rows_to_table("steps", rows))  # as RunData.steps has it


def test_a_replayed_step_counts_once_as_its_last_attempt():
    oom = {"kind": "oom"}
    restart = {"kind": "restart", "lost_s": 5.0}
    rows = [
        step(0, 0, "keep-all"),
        step(1, 0, "keep-all", tokens=1000),  # trained, then lost to the OOM in step 2
        step(1, 0, "keep-all", start_ns=10 * S, end_ns=12 * S, tokens=1000,
             events=[oom, restart, {"kind": "replay", "step": 1}]),
        step(2, 0, "keep-all", start_ns=13 * S, end_ns=14 * S),
    ]  # fmt: skip
    table = step_table(pd.DataFrame([r.to_dict() for r in rows]))
    assert table["step"].tolist() == [0, 1, 2]
    assert table["tokens"].tolist() == [1000, 1000, 1000]
    assert table["time_s"].tolist() == pytest.approx([1, 2, 1])  # the replay's own time
    assert table["ooms"].tolist() == [0, 1, 0]
    assert table["lost_s"].tolist() == [0.0, 5.0, 0.0]


def test_steps_are_combined_per_step_across_ranks(steps):
    table = step_table(steps)
    static = table[table["policy"] == "static"]
    assert static["tokens"].tolist() == [2000, 2000]
    assert static["time_s"].tolist() == pytest.approx([1 + 1e-6, 1 + 1e-6])
    assert static["mfu"].tolist() == pytest.approx([0.45, 0.45])
    assert static["lost_s"].tolist() == [0.0, 30.0]
    assert static["ooms"].tolist() == [0, 1]
    events = event_table(steps)
    assert events[["kind", "step", "rank"]].values.tolist() == [
        ["restart", 1, 0],
        ["restart", 1, 1],
        ["oom", 1, 1],
    ]
    assert events["t_s"].tolist() == pytest.approx([3.0, 3.000001, 3.0])
    assert events["detail"].iloc[2] == "bytes=1"


def test_effective_tokens_per_second_counts_the_time_lost_to_restarts(steps):
    table = step_table(steps)
    per_policy = policy_throughput_frame(table).set_index("policy")
    static = per_policy.loc["static"]
    assert static["tokens_per_s"] == pytest.approx(4000 / 2, rel=1e-5)
    assert static["effective_tokens_per_s"] == pytest.approx(4000 / 32, rel=1e-5)
    assert static["restarts"] == 1 and static["ooms"] == 1
    fig = policy_throughput(per_policy.reset_index(), table)
    bars = [t for t in fig.data if t.type == "bar"]
    assert [t.name for t in bars] == ["tokens/s", "effective tokens/s"]
    assert list(bars[0].x) == ["static", plotly_text(XSS)]


def test_training_timeline_puts_events_on_the_time_axis(steps):
    fig = training_timeline(step_table(steps), event_table(steps))
    markers = {t.name: t for t in fig.data if t.mode == "markers"}
    assert set(markers) == {"restart", "oom"}
    assert list(markers["oom"].x) == [3.0]
    assert "30.0 s lost" in markers["restart"].text[0]


def test_peak_memory_and_expert_load(steps):
    fig = peak_memory(steps)
    assert [t.name for t in fig.data] == ["static", plotly_text(XSS)]
    assert sorted(fig.data[0].y) == [10, 10, 11, 11]
    matrix = expert_load_matrix(steps["tokens_per_expert"])
    assert matrix.tolist() == [
        [80, 120],
        [80, 120],
    ]  # 4 x [[10, 30], [20, 20]] + [[40, 0], [0, 40]]
    heatmap = expert_load_heatmap(matrix).data[0]
    assert np.asarray(heatmap.z).ravel().tolist() == pytest.approx([0.8, 1.2, 0.8, 1.2])
    assert expert_load_heatmap(np.zeros((0, 0))).layout.annotations
