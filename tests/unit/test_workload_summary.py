"""Turn, trace-replay and repeat summaries, computed from request frames."""

from __future__ import annotations

import dataclasses
import math

import pytest
from scipy import stats

from moeperf.collectors.quantiles import Described, QuantileEstimate
from moeperf.collectors.records import RequestRecord
from moeperf.collectors.serving_records import empty_scenario
from moeperf.collectors.tables import records_frame
from moeperf.collectors.workload_summary import (
    repeat_base,
    repeat_levels,
    trace_replay,
    turn_summaries,
)

MS = 1_000_000


def _record(i: int, turn: int | None, ttft_ms: int, lag_ms: float = 0.0, **kw) -> RequestRecord:
    intended = i * 100 * MS
    send = intended + int(lag_ms * MS)
    return RequestRecord(
        request_id=f"r{i}",
        scenario="c=2",
        phase="measure",
        worker=0,
        intended_send_ns=intended,
        send_ns=send,
        done_ns=send + 50 * MS,
        status="ok",
        chunk_ns=[intended + ttft_ms * MS, intended + (ttft_ms + 5) * MS],
        chunk_tokens=[1, 1],
        first_token_ns=intended + ttft_ms * MS,
        last_token_ns=intended + (ttft_ms + 5) * MS,
        output_tokens=2,
        turn=turn,
        conversation=None if turn is None else "c0",
        **kw,
    )


def test_turns_group_ttft_and_the_servers_cached_share():
    records = [
        _record(0, 1, 40, prompt_tokens=100, cached_prompt_tokens=0),
        _record(1, 2, 20, prompt_tokens=200, cached_prompt_tokens=150),
        _record(2, 2, 30, prompt_tokens=200, cached_prompt_tokens=170),
    ]
    turns = turn_summaries(records_frame(records))
    assert [t.turn for t in turns] == [1, 2]
    assert turns[0].cached_ratio == 0.0
    assert turns[1].cached_ratio == pytest.approx(320 / 400)
    assert turns[1].ttft_s.value_at(0.5) == pytest.approx(0.025)
    assert turns[1].prompt_tokens_mean == 200
    assert turn_summaries(records_frame([_record(0, None, 40)])) == ()


def test_trace_replay_counts_sends_within_5_ms():
    records = [_record(i, None, 10, lag_ms=lag) for i, lag in enumerate([0.1, 0.4, 4.9, 7.0])]
    replay = trace_replay(records_frame(records), trace_requests=5, speedup=2.0)
    assert (replay.trace_requests, replay.sent, replay.speedup) == (5, 4, 2.0)
    assert replay.on_time_ratio == 0.75
    assert replay.send_lag_s.value_at(0.5) == pytest.approx(0.00265)


def _scenario(p50_s: float, half_s: float, tok_s: float):
    estimate = QuantileEstimate(0.5, p50_s, p50_s - half_s, p50_s + half_s)
    described = Described(100, p50_s, (estimate,))
    entry = empty_scenario()
    latency = dataclasses.replace(entry.latency_s, ttft_s=described)
    return dataclasses.replace(entry, latency_s=latency, output_throughput_tok_s=tok_s)


def test_repeats_between_interval_and_dispersion_ratio():
    assert repeat_base("in=64 c=4 unique #12") == ("in=64 c=4 unique", 12)
    assert repeat_base("c=4") is None
    scenarios = {
        "c=4 #1": _scenario(0.100, 0.002, 50.0),
        "c=4 #2": _scenario(0.110, 0.002, 52.0),
        "c=4 #3": _scenario(0.120, 0.004, 54.0),
        "c=8": _scenario(0.2, 0.01, 60.0),
    }
    (level,) = repeat_levels(scenarios)
    assert level.level == "c=4" and level.scenarios == ("c=4 #1", "c=4 #2", "c=4 #3")
    ttft = next(m for m in level.metrics if m.metric == "ttft_p50_s")
    assert ttft.values == (0.100, 0.110, 0.120)
    margin = stats.t.ppf(0.975, 2) * 0.01 / math.sqrt(3)  # SD of 0.10, 0.11, 0.12 is 0.01
    assert ttft.between_low == pytest.approx(0.11 - margin)
    assert ttft.between_high == pytest.approx(0.11 + margin)
    assert ttft.within_half == pytest.approx(0.002)
    # Runs differ by far more than one run's interval admits: 0.01 / (0.002 / 1.96).
    assert ttft.dispersion_ratio == pytest.approx(9.8)
    tok = next(m for m in level.metrics if m.metric == "output_tok_s")
    assert tok.mean == pytest.approx(52.0) and tok.within_half is None
