"""The gate's workload metrics: TTFT per conversation turn and the cached share of prompts."""

from __future__ import annotations

import pytest

from moeperf.collectors.records import RequestRecord
from moeperf.collectors.tables import records_frame
from moeperf.reports.gate import gate
from moeperf.reports.samples import serving_samples

MS = 1_000_000


def _record(i: int, turn: int, ttft_ms: float, cached: int | None) -> RequestRecord:
    intended = i * 10 * MS
    first = intended + int(ttft_ms * MS)
    return RequestRecord(
        request_id=f"r{i}",
        scenario="c=2",
        phase="measure",
        worker=0,
        intended_send_ns=intended,
        send_ns=intended,
        done_ns=first + 5 * MS,
        status="ok",
        chunk_ns=[first, first + 5 * MS],
        chunk_tokens=[1, 1],
        first_token_ns=first,
        last_token_ns=first + 5 * MS,
        prompt_tokens=100 * turn,
        output_tokens=2,
        conversation=f"c{i // 2}",
        turn=turn,
        cached_prompt_tokens=cached,
    )


def _run(ttft_turn2_ms: float, cached_turn2: int | None, n: int = 200) -> list[RequestRecord]:
    out = []
    for i in range(n):
        turn = 1 + i % 2
        jitter = (i % 7) * 0.1
        if turn == 1:
            out.append(_record(i, 1, 40 + jitter, 0))
        else:
            out.append(_record(i, 2, ttft_turn2_ms + jitter, cached_turn2))
    return out


def test_turns_and_cached_share_are_gate_metrics():
    metrics = {m.key: m for m in serving_samples(records_frame(_run(20, 150)))}
    assert metrics["c=2/turn1/ttft_s p50"].point == pytest.approx(0.0403)
    assert metrics["c=2/turn2/ttft_s p50"].point == pytest.approx(0.0203)
    share = metrics["c=2/cached_prompt_share mean"]
    assert (share.direction, share.metric_class) == ("higher", "cache")
    assert share.point == pytest.approx(0.375)  # turn 1: 0 of 100; turn 2: 150 of 200


def test_no_cached_share_where_nothing_was_cached_or_nothing_said():
    for cached in (0, None):
        keys = {m.key for m in serving_samples(records_frame(_run(20, cached)))}
        assert "c=2/cached_prompt_share mean" not in keys
        assert "c=2/turn2/ttft_s p50" in keys


def test_a_cache_that_stopped_hitting_fails_the_gate():
    baseline = serving_samples(records_frame(_run(20, 150)))
    broken = serving_samples(records_frame(_run(40, 0)))
    result = gate(broken, baseline, n_boot=500)
    by_key = {f"{v.name} {v.statistic}": v for v in result.verdicts}
    assert by_key["c=2/cached_prompt_share mean"].outcome == "missing from candidate"
    assert by_key["c=2/turn2/ttft_s p50"].outcome == "regression"
    assert result.exit_code == 1
