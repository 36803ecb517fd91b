"""The interactivity chart: 1 / TPOT against total output tokens/s, and its Pareto front."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from moeperf.collectors.quantiles import Described, QuantileEstimate
from moeperf.collectors.serving_records import LevelStatus, ScenarioSummary, empty_scenario
from moeperf.reports.figures.interactivity import COLUMNS, interactivity_chart, interactivity_frame
from moeperf.reports.figures.text import plotly_text

XSS = "<img src=x onerror=alert(1)>"


def tpot_s(p50: float, p99: float, ci: tuple[float, float] | None = None) -> Described:
    low, high = ci if ci is not None else (None, None)
    return Described(
        count=100,
        mean=p50,
        quantiles=(
            QuantileEstimate(q=0.5, value=p50, ci_low=low, ci_high=high),
            QuantileEstimate(q=0.99, value=p99, ci_low=None, ci_high=None),
        ),
    )


def level(
    total_tok_s: float | None,
    tpot: Described,
    *,
    load: float | None = None,
    input_tokens: int | None = None,
    status: LevelStatus = "ok",
) -> ScenarioSummary:
    empty = empty_scenario()
    return dataclasses.replace(
        empty,
        ok=100,
        output_throughput_tok_s=total_tok_s,
        latency_s=dataclasses.replace(empty.latency_s, tpot_s=tpot),
        level=load,
        input_tokens=input_tokens,
        status=status,
    )


def sweep() -> dict[str, ScenarioSummary]:
    # TPOTs of 1/x s, so the speeds are exact: 50, 40, 20 and 10 tok/s/user.
    return {
        "c=1": level(100.0, tpot_s(0.02, 0.04, (0.016, 0.025)), load=1),
        "c=4": level(380.0, tpot_s(0.025, 0.05), load=4),
        "c=16": level(1200.0, tpot_s(0.05, 0.1), load=16),
        # Past saturation: no more total throughput and slower for every user.
        "c=64": level(1100.0, tpot_s(0.1, 0.2), load=64),
    }


def test_the_frame_inverts_tpot_and_its_interval():
    frame = interactivity_frame(sweep())
    assert list(frame.columns) == COLUMNS
    assert frame["scenario"].tolist() == ["c=1", "c=4", "c=16", "c=64"]
    assert frame["level"].tolist() == [1.0, 4.0, 16.0, 64.0]
    assert frame["total_tok_s"].tolist() == [100.0, 380.0, 1200.0, 1100.0]
    assert frame["user_tok_s_p50"].tolist() == pytest.approx([50.0, 40.0, 20.0, 10.0])
    assert frame["user_tok_s_p99"].tolist() == pytest.approx([25.0, 20.0, 10.0, 5.0])
    # The slow end of the TPOT interval is the low end of the speed interval.
    first = frame.iloc[0]
    assert first["user_tok_s_low"] == pytest.approx(1 / 0.025)
    assert first["user_tok_s_high"] == pytest.approx(1 / 0.016)
    assert first["user_tok_s_low"] < first["user_tok_s_p50"] < first["user_tok_s_high"]
    # No interval (too few samples): no bounds, never a made-up one.
    assert frame["user_tok_s_low"].iloc[1:].isna().all()
    assert frame["user_tok_s_high"].iloc[1:].isna().all()
    assert frame["input_tokens"].isna().all()


def test_a_dominated_level_is_off_the_front():
    frame = interactivity_frame(sweep())
    # c=64 has less total and less per-user tokens/s than c=16.
    assert frame["on_front"].tolist() == [True, True, True, False]
    fig = interactivity_chart(frame)
    (front,) = [t for t in fig.data if t.name.endswith("Pareto front")]
    assert list(front.x) == [100.0, 380.0, 1200.0]
    assert front.marker.symbol == "circle-open"
    (p99,) = [t for t in fig.data if t.name.endswith("p99")]
    assert p99.line.dash == "dash"
    assert len(p99.x) == 4


def test_a_failed_level_is_never_on_the_front_and_pushes_none_off_it():
    scenarios = sweep()
    # Faster for the user and more total than every ok level, but the level failed.
    scenarios["bad"] = level(5000.0, tpot_s(0.01, 0.02), status="failed")
    frame = interactivity_frame(scenarios)
    assert frame["on_front"].tolist() == [True, True, True, False, False]
    assert frame["user_tok_s_p50"].iloc[-1] == pytest.approx(100.0)
    fig = interactivity_chart(frame)
    (hollow,) = [t for t in fig.data if t.name.startswith("level not ok")]
    assert list(hollow.x) == [5000.0]
    assert hollow.marker.symbol == "circle-open"
    assert all(5000.0 not in list(t.x) for t in fig.data if t is not hollow)


def test_a_prompt_length_sweep_gets_a_line_and_a_front_per_prompt_length():
    scenarios = {
        "p=128 c=1": level(100.0, tpot_s(0.02, 0.04), input_tokens=128),
        "p=128 c=8": level(600.0, tpot_s(0.04, 0.08), input_tokens=128),
        # Dominated by p=128 c=8, but on another line: on its own front.
        "p=4096 c=1": level(80.0, tpot_s(0.025, 0.05), input_tokens=4096),
        "p=4096 c=8": level(400.0, tpot_s(0.05, 0.1), input_tokens=4096),
        "p=4096 c=32": level(390.0, tpot_s(0.1, 0.2), input_tokens=4096),
    }
    frame = interactivity_frame(scenarios)
    assert frame["input_tokens"].tolist() == [128, 128, 4096, 4096, 4096]
    assert frame["on_front"].tolist() == [True, True, True, True, False]
    fig = interactivity_chart(frame)
    fronts = {t.name: len(t.x) for t in fig.data if t.name.endswith("Pareto front")}
    assert fronts == {"prompt 128 tok: Pareto front": 2, "prompt 4096 tok: Pareto front": 2}


def test_a_level_without_numbers_gets_no_point():
    scenarios = sweep()
    scenarios["interrupted"] = empty_scenario()
    frame = interactivity_frame(scenarios)
    assert pd.isna(frame["user_tok_s_p50"].iloc[-1])
    assert not frame["on_front"].iloc[-1]
    fig = interactivity_chart(frame)
    assert all(len(t.x) <= 4 for t in fig.data)


def test_an_empty_frame_says_why():
    fig = interactivity_chart(interactivity_frame({}))
    assert not fig.data
    assert "TPOT p50" in fig.layout.annotations[0].text


def test_scenario_names_are_escaped():
    scenarios = sweep()
    scenarios[XSS] = scenarios.pop("c=64")
    fig = interactivity_chart(interactivity_frame(scenarios))
    assert plotly_text(XSS) in fig.data[0].customdata[:, 0]
    assert XSS not in str(fig.to_plotly_json())
