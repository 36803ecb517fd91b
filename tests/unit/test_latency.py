"""Metric derivations on hand-built records."""

import math
from typing import Any

import pandas as pd
import pytest

from moeperf.collectors.latency import icl_samples_s, itl_samples_s, per_request
from moeperf.collectors.records import RequestRecord
from moeperf.collectors.serving_records import TokenDiscrepancy
from moeperf.collectors.summary import Slo, summarize_scenario

MS = 1_000_000


def record(**overrides: Any) -> RequestRecord:
    base: dict[str, Any] = dict(
        request_id="r0",
        scenario="c=1",
        phase="measure",
        worker=0,
        intended_send_ns=0,
        send_ns=2 * MS,
        done_ns=200 * MS,
        status="ok",
    )
    base.update(overrides)
    return RequestRecord(**base)


def frame(*records: RequestRecord) -> pd.DataFrame:
    return pd.DataFrame([r.to_dict() for r in records])


def test_role_only_first_chunk_does_not_count_as_first_token():
    # role-only chunk at 5 ms, tokens at 50, 60, 70 ms, usage-only chunk at 71 ms.
    r = record(
        chunk_ns=[5 * MS, 50 * MS, 60 * MS, 70 * MS, 71 * MS],
        chunk_tokens=[0, 1, 1, 1, 0],
        first_token_ns=50 * MS,
        last_token_ns=70 * MS,
        output_tokens=3,
    )
    m = per_request(frame(r)).iloc[0]
    assert m["ttft_s"] == pytest.approx(0.050)
    assert m["ttft_from_send_s"] == pytest.approx(0.048)
    assert m["queue_delay_s"] == pytest.approx(0.002)
    assert m["tpot_s"] == pytest.approx(0.010)
    assert m["e2e_s"] == pytest.approx(0.070)
    assert list(itl_samples_s(frame(r))["itl_s"]) == pytest.approx([0.01, 0.01])


def test_multi_token_chunks_divide_the_gap_over_their_tokens():
    # MTP-like: 1 token at 50 ms, then 3 tokens at 80 ms, then 2 tokens at 100 ms.
    r = record(
        chunk_ns=[50 * MS, 80 * MS, 100 * MS],
        chunk_tokens=[1, 3, 2],
        first_token_ns=50 * MS,
        last_token_ns=100 * MS,
        output_tokens=6,
    )
    itl = list(itl_samples_s(frame(r))["itl_s"])
    assert itl == pytest.approx([0.01, 0.01, 0.01, 0.01, 0.01])
    assert list(icl_samples_s(frame(r))["icl_s"]) == pytest.approx([0.03, 0.02])
    # TPOT = (100 - 50) ms / (6 - 1) tokens
    assert per_request(frame(r)).iloc[0]["tpot_s"] == pytest.approx(0.010)


def test_missing_usage_falls_back_to_client_count_then_chunk_sum():
    chunks = dict(
        chunk_ns=[50 * MS, 60 * MS],
        chunk_tokens=[1, 1],
        first_token_ns=50 * MS,
        last_token_ns=60 * MS,
    )
    with_client = record(client_output_tokens=4, **chunks)
    without = record(request_id="r1", **chunks)
    m = per_request(frame(with_client, without))
    assert list(m["output_tokens"]) == [4, 2]
    assert m.iloc[0]["tpot_s"] == pytest.approx(0.010 / 3)
    assert m.iloc[1]["tpot_s"] == pytest.approx(0.010)


def test_single_token_output_has_no_tpot():
    r = record(chunk_ns=[50 * MS], chunk_tokens=[1], first_token_ns=50 * MS, last_token_ns=50 * MS)
    assert math.isnan(per_request(frame(r)).iloc[0]["tpot_s"])


def test_failed_requests_give_no_latency_but_count_in_goodput():
    good = record(
        chunk_ns=[50 * MS, 60 * MS],
        chunk_tokens=[1, 1],
        first_token_ns=50 * MS,
        last_token_ns=60 * MS,
        output_tokens=2,
    )
    failed = record(request_id="r1", status="error", error_type="http_5xx", http_status=500)
    slow = record(
        request_id="r2",
        chunk_ns=[900 * MS, 910 * MS],
        chunk_tokens=[1, 1],
        first_token_ns=900 * MS,
        last_token_ns=910 * MS,
        done_ns=950 * MS,
        output_tokens=2,
    )
    summary = summarize_scenario(frame(good, failed, slow), Slo(ttft_s=0.5))
    assert summary.requests == 3
    assert summary.errors == 1
    assert summary.error_types == {"http_5xx": 1}
    assert summary.latency_s.ttft_s.count == 2
    # one of three meets the SLO: the failure is in the denominator.
    assert summary.goodput_ratio == pytest.approx(1 / 3)
    window_s = (950 - 2) / 1000
    assert summary.goodput_rps == pytest.approx(1 / window_s)
    assert summary.output_throughput_tok_s == pytest.approx(4 / window_s)


def test_warmup_and_cooldown_are_excluded_and_counted():
    measured = record(
        chunk_ns=[50 * MS], chunk_tokens=[1], first_token_ns=50 * MS, last_token_ns=50 * MS
    )
    warm = record(request_id="w", phase="warmup", chunk_ns=[1], chunk_tokens=[1])
    cool = record(request_id="c", phase="cooldown", chunk_ns=[1], chunk_tokens=[1])
    summary = summarize_scenario(frame(warm, measured, cool))
    assert summary.requests == 1
    assert summary.excluded_warmup == 1
    assert summary.excluded_cooldown == 1


def test_token_count_discrepancy_compares_server_and_client_counts():
    chunks = dict(chunk_ns=[MS], chunk_tokens=[1], first_token_ns=MS, last_token_ns=MS)
    same = record(output_tokens=5, client_output_tokens=5, **chunks)
    more = record(request_id="r1", output_tokens=5, client_output_tokens=7, **chunks)
    fewer = record(request_id="r3", output_tokens=5, client_output_tokens=4, **chunks)
    unknown = record(request_id="r2", output_tokens=5, **chunks)
    discrepancy = summarize_scenario(frame(same, more, fewer, unknown)).output_token_discrepancy
    assert discrepancy == TokenDiscrepancy(
        compared=3, differing=2, mean_client_minus_server=1 / 3, client_fewer=1, client_more=1
    )


@pytest.mark.parametrize(
    "r",
    [
        record(chunk_ns=[5 * MS, 50 * MS, 80 * MS, 100 * MS], chunk_tokens=[0, 1, 3, 2],
               first_token_ns=50 * MS, last_token_ns=100 * MS, output_tokens=6),
        record(chunk_ns=[50 * MS], chunk_tokens=[1], first_token_ns=50 * MS,
               last_token_ns=50 * MS),
        record(chunk_ns=[50 * MS, 70 * MS], chunk_tokens=[1, 1], first_token_ns=50 * MS,
               last_token_ns=70 * MS, client_output_tokens=3),
        record(status="error", error_type="http_5xx"),
    ],
)  # fmt: skip
def test_single_record_derivation_agrees_with_the_frame_derivation(r):
    from moeperf.collectors.latency import request_latencies

    one = request_latencies(r)
    row = per_request(frame(r)).iloc[0]
    for name in ("ttft_s", "ttft_from_send_s", "queue_delay_s", "tpot_s", "e2e_s"):
        value = getattr(one, name)
        if value is None:
            assert math.isnan(row[name]), name
        else:
            assert value == pytest.approx(row[name]), name
    assert list(one.itl_s) == pytest.approx(list(itl_samples_s(frame(r))["itl_s"]))
