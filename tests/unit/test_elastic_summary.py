"""An elasticity drill's events judged on hand-built request records
(collectors/elastic_summary.py): a kill's losses split by when they were sent, a graceful
scale-in that lost a request, and a scale-out's output tok/s before and after."""

from __future__ import annotations

from moeperf.collectors.drill_records import FaultEvent
from moeperf.collectors.drill_summary import summarize_drill
from moeperf.collectors.elastic_records import ElasticAction
from moeperf.collectors.elastic_summary import summarize_elastic
from moeperf.collectors.records import RequestRecord
from moeperf.collectors.tables import records_frame

S = 1_000_000_000
TOKENS = 10


def request(i: int, sent_s: float, done_s: float, ok: bool = True) -> RequestRecord:
    send, done = int(sent_s * S), int(done_s * S)
    return RequestRecord(
        request_id=f"w0-{i}", scenario="c=4", phase="measure", worker=0, intended_send_ns=send,
        send_ns=send, done_ns=done, status="ok" if ok else "error",
        error_type=None if ok else "stream_truncated",
        first_token_ns=send + S // 100 if ok else None, last_token_ns=done if ok else None,
        output_tokens=TOKENS if ok else None,
    )  # fmt: skip


def steady(start_s: float, end_s: float, per_s: float, first: int) -> list[RequestRecord]:
    """Requests ending ``per_s`` a second, each 0.1 s long."""
    count = int((end_s - start_s) * per_s)
    return [request(first + k, start_s + k / per_s, start_s + k / per_s + 0.1)
            for k in range(count)]  # fmt: skip


def judged(records: list[RequestRecord], events: list[tuple[str, float, float]],
           actions: list[ElasticAction], ratio: float | None = None,
           detection_s: float = 0.0):  # fmt: skip
    frame = records_frame(records)
    faults = [FaultEvent(i, kind, at, int(at * S), int((at + length) * S), True, "done")
              for i, (kind, at, length) in enumerate(events)]  # fmt: skip
    drill = summarize_drill(frame, "c=4", 0, faults, {0: len(records)}, 2.0)
    return summarize_elastic(drill, actions, frame, router="router", replicas_started=3,
                             shares={0: 0.5, 1: 0.5}, max_recovery_s=5.0,
                             max_first_served_s=10.0, min_scale_out_ratio=ratio,
                             detection_s=detection_s).events  # fmt: skip


def test_a_kill_loses_what_was_in_flight_and_fails_when_later_sends_fail():
    records = [*steady(0, 20, 10, 0), request(1000, 4.95, 5.01, ok=False),
               request(1001, 4.97, 5.02, ok=False)]  # fmt: skip
    kill = ElasticAction(0, "kill", 1, 2.0, None, None, 2)
    (event,) = judged(records, [("kill", 5.0, 0.01)], [kill])
    assert (event.lost_in_flight, event.lost_after, event.verdict) == (2, 0, "pass")
    # The same, and two more sent after the kill to the dead replica.
    later = [*records, request(1002, 5.5, 5.51, ok=False), request(1003, 6.0, 6.01, ok=False)]
    (event,) = judged(later, [("kill", 5.0, 0.01)], [kill])
    assert (event.lost_in_flight, event.lost_after, event.verdict) == (2, 2, "fail")
    assert event.why.startswith("2 request(s) sent more than 0 s after the kill failed")
    # A router that checks its workers' health every second, two failures in a row: it
    # could not know for 2 s, and both were sent in that time (0.5 and 1 s after).
    (event,) = judged(later, [("kill", 5.0, 0.01)], [kill], detection_s=2.0)
    assert (event.lost_in_flight, event.lost_undetected, event.lost_after) == (2, 2, 0)
    assert event.verdict == "pass" and "2 sent in the router's 2 s to notice" in event.why


def test_a_graceful_scale_in_that_lost_a_request_fails():
    records = [*steady(0, 20, 10, 0), request(1000, 7.9, 8.2, ok=False)]
    scale_in = ElasticAction(0, "scale_in", 0, 1.0, None, 0.3, 3)
    (event,) = judged(records, [("scale_in", 8.0, 0.5)], [scale_in])
    assert event.verdict == "fail" and event.why.startswith("a graceful scale-in lost 1 request")


def test_a_scale_out_is_judged_by_its_output_before_and_after_when_asked():
    # 10 requests/s before the scale-out, 15 after it (10 tokens each): 1.5x with 2 -> 3.
    records = [*steady(0, 5, 10, 0), *steady(5.9, 20, 15, 100)]
    out = ElasticAction(0, "scale_out", 2, None, 1.0, None, 2)
    (event,) = judged(records, [("scale_out", 5.0, 1.0)], [out])
    assert event.output_tok_s_before == 100.0 and event.output_tok_s_after == 150.0
    assert event.verdict == "pass"  # no ratio asked: the first request served is the verdict
    (event,) = judged(records, [("scale_out", 5.0, 1.0)], [out], ratio=0.9)
    assert event.verdict == "pass" and "(1.50x >= 1.35x)" in event.why
    (event,) = judged(records, [("scale_out", 5.0, 1.0)], [out], ratio=1.0)  # wants 1.5x
    assert event.verdict == "pass"
    slower = [*steady(0, 5, 10, 0), *steady(5.9, 20, 11, 100)]
    (event,) = judged(slower, [("scale_out", 5.0, 1.0)], [out], ratio=0.9)
    assert event.verdict == "fail" and "below 0.9 x 3/2 = 1.35x" in event.why
