"""The sweep over prompt lengths in the report: its frame, table and four panels."""

from __future__ import annotations

import dataclasses
import math

import pytest

from moeperf.collectors.quantiles import EMPTY, Described, QuantileEstimate
from moeperf.collectors.serving_records import LevelStatus, ScenarioSummary, empty_scenario
from moeperf.collectors.sweep_records import SweepPointSummary, SweepSummary
from moeperf.collectors.target_counters import TargetCounters
from moeperf.reports.figures.sweep import NO_KV, NO_TPOT, sweep_chart
from moeperf.reports.figures.sweep_frame import COLUMNS, kv_panel, sweep_frame, sweep_table_frame

REASON = (
    "not available from this target: 8192 prompt + 64 output tokens exceed its context "
    "limit of 4096 tokens (spec: sweep.input_tokens.context_tokens)"
)


def described(p50_s: float, p99_s: float, ci_s: tuple[float, float] | None = None) -> Described:
    low, high = ci_s if ci_s is not None else (None, None)
    return Described(
        count=100,
        mean=p50_s,
        quantiles=(
            QuantileEstimate(q=0.5, value=p50_s, ci_low=low, ci_high=high),
            QuantileEstimate(q=0.99, value=p99_s, ci_low=None, ci_high=None),
        ),
    )


def scenario(
    input_tokens: int,
    level: float,
    ttft: Described,
    *,
    tpot: Described = EMPTY,
    counters: TargetCounters | None = None,
    status: LevelStatus = "ok",
) -> ScenarioSummary:
    empty = empty_scenario()
    return dataclasses.replace(
        empty,
        requests=40,
        ok=40,
        window_s=10.0,
        latency_s=dataclasses.replace(empty.latency_s, ttft_s=ttft, tpot_s=tpot),
        level=level,
        input_tokens=input_tokens,
        status=status,
        target_counters=counters,
    )


def counters(ratio: float | None, blocks: float | None = None) -> TargetCounters:
    total = None if blocks is None or ratio is None else blocks / ratio
    return TargetCounters(
        dialect="reference",
        gauge_scrapes=3,
        kv_usage_max_ratio=ratio,
        kv_usage_mean_ratio=ratio,
        kv_blocks_total=total,
        kv_blocks_used_max=blocks,
    )


def a_sweep(
    kv: tuple[TargetCounters | None, ...] = (None,) * 4,
) -> tuple[SweepSummary, dict[str, ScenarioSummary]]:
    # TTFT p50 of 0.5 s at 1024 tokens: 2,048 tok/s, and its interval 0.4-0.8 s inverted.
    scenarios = {
        "in=1024 c=1": scenario(
            1024, 1, described(0.5, 0.9, (0.4, 0.8)), tpot=described(0.02, 0.03), counters=kv[0]
        ),
        "in=1024 c=4": scenario(1024, 4, described(1.0, 2.0), counters=kv[1]),
        "in=4096 c=1": scenario(4096, 1, described(2.0, 3.0), counters=kv[2]),
        "in=4096 c=4": scenario(4096, 4, described(4.0, 8.0), counters=kv[3], status="failed"),
    }
    sweep = SweepSummary(
        context_tokens=4096 + 64,
        context_source="spec: sweep.input_tokens.context_tokens",
        max_output_tokens=64,
        points=(
            SweepPointSummary(1024, ("in=1024 c=1", "in=1024 c=4")),
            SweepPointSummary(4096, ("in=4096 c=1", "in=4096 c=4")),
            SweepPointSummary(8192, not_available=REASON),
        ),
        load_mode="concurrency",
    )
    return sweep, scenarios


def test_the_frame_has_a_row_per_sent_scenario_and_inverts_ttft():
    sweep, scenarios = a_sweep()
    frame = sweep_frame(sweep, scenarios)
    assert list(frame.columns) == COLUMNS
    assert frame["scenario"].tolist() == list(scenarios)
    assert frame["input_tokens"].tolist() == [1024, 1024, 4096, 4096]
    assert frame["level"].tolist() == [1.0, 4.0, 1.0, 4.0]
    first = frame.iloc[0]
    assert first["ttft_p50_s"] == 0.5 and first["ttft_p99_s"] == 0.9
    assert (first["ttft_p50_low_s"], first["ttft_p50_high_s"]) == (0.4, 0.8)
    # Prefill rate = L / TTFT p50; the slow end of the TTFT interval is the low rate.
    assert first["prefill_tok_s"] == pytest.approx(1024 / 0.5)
    assert first["prefill_low_tok_s"] == pytest.approx(1024 / 0.8)
    assert first["prefill_high_tok_s"] == pytest.approx(1024 / 0.4)
    # Total: L x 40 ok requests / a 10 s window.
    assert first["total_prompt_tok_s"] == pytest.approx(1024 * 40 / 10)
    assert frame["prefill_tok_s"].tolist() == pytest.approx([2048, 1024, 2048, 1024])
    # No interval (too few samples): no bounds, never a made-up one.
    assert frame["prefill_low_tok_s"].iloc[1:].isna().all()
    assert first["tpot_p50_s"] == 0.02 and frame["tpot_p50_s"].iloc[1:].isna().all()
    assert frame["status"].tolist() == ["ok", "ok", "ok", "failed"]


def test_the_table_gives_the_reason_of_a_length_not_sent():
    sweep, scenarios = a_sweep()
    table = sweep_table_frame(sweep, sweep_frame(sweep, scenarios))
    assert table["prompt tokens"].tolist() == [1024, 1024, 4096, 4096, 8192]
    assert table["status"].iloc[-1] == REASON
    assert table["prefill tok/s 95% CI"].iloc[0] == "1,280 - 2,560"
    assert table["TTFT p50 95% CI ms"].tolist()[:2] == ["400.0 - 800.0", "too few samples"]


def test_kv_shows_blocks_where_the_target_states_them_else_percent():
    sweep, scenarios = a_sweep(kv=(counters(0.25, 64), counters(0.5, 128), None, None))
    frame = sweep_frame(sweep, scenarios)
    assert frame["kv_blocks_used_max"].tolist()[:2] == [64, 128]
    assert kv_panel(frame) == ("kv_blocks_used_max", 1.0, "KV-cache blocks in use")
    fig = sweep_chart(frame, sweep.not_available())
    assert fig.layout.yaxis4.title.text == "KV-cache blocks in use"
    (c1,) = [t for t in fig.data if t.xaxis == "x4" and t.name == "c=1"]
    # c=1 at 4096 tokens has no counters: no point (a gap), not a zero.
    assert c1.y[0] == 64 and math.isnan(c1.y[1])

    sweep, scenarios = a_sweep(kv=(counters(0.25), counters(0.5), counters(0.75), None))
    frame = sweep_frame(sweep, scenarios)
    assert kv_panel(frame) == ("kv_usage_max_ratio", 100.0, "KV-cache usage (% of blocks)")
    fig = sweep_chart(frame, sweep.not_available())
    (c1,) = [t for t in fig.data if t.xaxis == "x4" and t.name == "c=1"]
    assert list(c1.y) == [25.0, 75.0]
    assert NO_KV not in [a.text for a in fig.layout.annotations]


def test_without_kv_numbers_the_panel_says_not_available():
    sweep, scenarios = a_sweep(kv=(counters(None), None, None, None))
    frame = sweep_frame(sweep, scenarios)
    assert kv_panel(frame) is None
    fig = sweep_chart(frame, sweep.not_available())
    assert not [t for t in fig.data if t.xaxis == "x4"]
    (note,) = [a for a in fig.layout.annotations if a.text == NO_KV]
    assert note.xref == "x4 domain"
    assert NO_KV == "KV-cache usage: not available from this target"


def test_a_length_not_sent_is_a_dotted_line_in_every_panel_with_its_reason():
    sweep, scenarios = a_sweep()
    fig = sweep_chart(sweep_frame(sweep, scenarios), sweep.not_available())
    lines = [s for s in fig.layout.shapes if s.x0 == 8192]
    assert sorted(s.xref for s in lines) == ["x", "x2", "x3", "x4"]
    assert all(s.line.dash == "dot" and s.x1 == 8192 for s in lines)
    labels = [a for a in fig.layout.annotations if a.hovertext == REASON]
    assert len(labels) == 4
    (top,) = [a for a in labels if a.xref == "x"]
    assert top.text == "not available"
    # An annotation on a log axis sits at log10 of the value.
    assert top.x == pytest.approx(math.log10(8192))
    # The x range reaches past the length not sent, so its line is drawn.
    assert 10 ** fig.layout.xaxis.range[1] > 8192
    assert fig.layout.xaxis.type == "log" and fig.layout.xaxis4.type == "log"


def test_levels_keep_their_colour_and_failed_points_are_hollow():
    sweep, scenarios = a_sweep()
    fig = sweep_chart(sweep_frame(sweep, scenarios), sweep.not_available())
    # One legend entry per level; every other trace joins its group.
    assert [t.name for t in fig.data if t.showlegend] == ["c=1", "c=4"]
    colours: dict[str, set[str]] = {}
    for trace in fig.data:
        colours.setdefault(trace.name, set()).add(trace.line.color)
    # The same colour for a level in every panel, and another for the other level.
    assert all(len(c) == 1 for c in colours.values())
    assert colours["c=1"] != colours["c=4"]
    (ttft_c4,) = [t for t in fig.data if t.xaxis == "x" and t.name == "c=4" and t.showlegend]
    assert list(ttft_c4.marker.symbol) == ["circle", "circle-open"]
    (p99,) = [t for t in fig.data if t.xaxis == "x" and t.name == "c=1" and not t.showlegend]
    assert p99.line.dash == "dash"
    assert list(p99.y) == pytest.approx([900.0, 3000.0])


def test_a_sweep_of_one_output_token_says_there_is_no_tpot():
    sweep, scenarios = a_sweep()
    scenarios = {
        name: dataclasses.replace(e, latency_s=dataclasses.replace(e.latency_s, tpot_s=EMPTY))
        for name, e in scenarios.items()
    }
    fig = sweep_chart(sweep_frame(sweep, scenarios), sweep.not_available())
    assert not [t for t in fig.data if t.xaxis == "x3"]
    (note,) = [a for a in fig.layout.annotations if a.text == NO_TPOT]
    assert note.xref == "x3 domain"
    # The line of the length not sent is still drawn in the empty panel.
    assert [s for s in fig.layout.shapes if s.xref == "x3"]


def test_a_sweep_without_summaries_says_why():
    sweep, _ = a_sweep()
    fig = sweep_chart(sweep_frame(sweep, {}), sweep.not_available())
    assert not fig.data
    assert "no scenario" in fig.layout.annotations[0].text


def test_a_level_is_named_from_its_record_across_lengths():
    sweep, scenarios = a_sweep()
    frame = sweep_frame(sweep, scenarios)
    assert frame["level_name"].tolist() == ["c=1", "c=4", "c=1", "c=4"]
    # A run stored before summaries kept the load mode: the level by its number.
    old = sweep_frame(dataclasses.replace(sweep, load_mode=None), scenarios)
    assert old["level_name"].tolist() == ["level 1", "level 4", "level 1", "level 4"]
    fig = sweep_chart(old, sweep.not_available())
    assert {t.name for t in fig.data if t.xaxis == "x"} >= {"level 1", "level 4"}
