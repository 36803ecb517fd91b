"""The drill's per-fault figures and its request audit, from records built by hand: each
figure is checked against what the records say by construction."""

from __future__ import annotations

import pandas as pd
import pytest

from moeperf.collectors.drill_records import FaultEvent
from moeperf.collectors.drill_summary import summarize_drill
from moeperf.collectors.records import RequestRecord
from moeperf.collectors.request_audit import audit_requests
from moeperf.collectors.tables import records_frame

S = 1_000_000_000


def _request(worker: int, n: int, sent_s: float, e2e_s: float, status: str = "ok",
             error: str | None = None) -> RequestRecord:  # fmt: skip
    sent = int(sent_s * S)
    done = sent + int(e2e_s * S)
    ok = status == "ok"
    return RequestRecord(
        request_id=f"w{worker}-{n}",
        scenario="rate=10",
        phase="measure",
        worker=worker,
        intended_send_ns=sent,
        send_ns=sent,
        done_ns=done,
        status=status,  # type: ignore[arg-type]
        chunk_ns=[sent + int(0.05 * S), done] if ok else [],
        chunk_tokens=[1, 1] if ok else [],
        first_token_ns=sent + int(0.05 * S) if ok else None,
        last_token_ns=done if ok else None,
        output_tokens=2 if ok else None,
        error_type=error,
    )


def _kill_at_5s() -> list[RequestRecord]:
    """One worker, a request every 0.5 s from 0 to 10 s; the target dies at 5 s and answers
    again at 6.2 s: the requests sent in [5, 6.2) fail to connect, one in flight at 5 s is
    cut, and the requests sent from 5 s on that succeed take 0.3 s."""
    records = []
    for n in range(20):
        sent = n * 0.5
        if sent < 5.0:
            if n == 9:  # sent 4.5, in flight at the kill
                records.append(_request(0, n, sent, 0.6, "error", "stream_truncated"))
            else:
                records.append(_request(0, n, sent, 0.2))
        elif sent < 6.2:
            records.append(_request(0, n, sent, 0.01, "error", "connect_error"))
        else:
            records.append(_request(0, n, sent, 0.3))
    return records


def test_a_kill_is_seen_as_its_failures_and_its_recovery_time():
    frame = records_frame(_kill_at_5s())
    event = FaultEvent(0, "kill", 5.0, int(5.0 * S), int(6.2 * S), True, "SIGKILL")
    drill = summarize_drill(frame, "rate=10", 0, [event], {0: 20}, compare_window_s=2.0)
    (fault,) = drill.faults
    # Failed: the truncated one (done 5.1 s) and the three connect errors (sent 5.0-6.0).
    assert fault.failed == 4
    assert fault.failed_by_type == {"connect_error": 3, "stream_truncated": 1}
    # First success of a request sent at or after 5 s: sent 6.5 s, done 6.8 s.
    assert fault.recovery_s == pytest.approx(1.8)
    assert fault.fault_s == pytest.approx(1.2)
    # Before: ok requests sent in [3, 5): 3.0, 3.5, 4.0 (4.5 failed).
    assert fault.before.requests == 3
    assert fault.before.e2e_p50_s == pytest.approx(0.2)
    # After: ok requests sent in [6.8, 8.8): 7.0 ... 8.5.
    assert fault.after.requests == 4
    assert fault.after.e2e_p50_s == pytest.approx(0.3)
    assert drill.audit.exact
    assert drill.statuses == {"ok": 16, "error": 4}


def test_a_fault_never_recovered_from_says_so():
    records = [_request(0, n, n * 0.5, 0.01, "error", "connect_error") for n in range(10)]
    event = FaultEvent(0, "kill", 0.5, int(0.5 * S), int(1.0 * S), False, "restart failed")
    drill = summarize_drill(records_frame(records), "rate=10", 0, [event], {0: 10}, 1.0)
    (fault,) = drill.faults
    assert fault.recovery_s is None
    assert fault.after.requests == 0
    assert fault.failed == 9  # everything done from 0.5 s on (the first ended at 0.01 s)
    assert not fault.injected


def test_each_fault_counts_only_up_to_the_next_one():
    records = _kill_at_5s()
    first = FaultEvent(0, "stall", 1.0, int(1.0 * S), int(1.1 * S), True, "")
    second = FaultEvent(1, "kill", 5.0, int(5.0 * S), int(6.2 * S), True, "")
    drill = summarize_drill(records_frame(records), "rate=10", 0, [first, second], {0: 20}, 1.0)
    assert drill.faults[0].failed == 0
    assert drill.faults[0].recovery_s == pytest.approx(0.2)  # sent 1.0, done 1.2
    assert drill.faults[1].failed == 4


def test_the_audit_finds_lost_unknown_and_doubled_records():
    ids = pd.Series(["w0-0", "w0-1", "w0-3", "w1-0", "w1-0", "w1-7", "stray"])
    audit = audit_requests(ids, {0: 4, 1: 2})
    assert audit.sent == 6
    assert audit.missing == 2  # w0-2 and w1-1
    assert audit.unknown == 2  # w1-7 (worker 1 sent 2) and an id of no worker
    assert audit.duplicated == 1
    assert "missing worker 0 #2" in audit.examples and "duplicated w1-0" in audit.examples
    assert not audit.exact


def test_the_audit_of_exact_records_is_exact():
    ids = pd.Series([f"w{w}-{n}" for w in range(3) for n in range(5)])
    audit = audit_requests(ids, {0: 5, 1: 5, 2: 5})
    assert audit.exact
    assert (audit.sent, audit.recorded, audit.examples) == (15, 15, ())


def test_a_request_that_slipped_in_before_a_window_opened_is_no_recovery():
    # The harness asks for the window at 2.0 s; the server opens it a moment later, so a
    # request sent at 2.001 s succeeds at 2.2 s while the window (to 3.0 s) fails the rest.
    records = [_request(0, 0, 1.0, 0.2), _request(0, 1, 2.001, 0.2)]
    records += [_request(0, n, 2.0 + 0.1 * n, 0.01, "error", "http_5xx") for n in range(2, 10)]
    records += [_request(0, 10, 3.1, 0.2)]
    event = FaultEvent(0, "http_error", 2.0, int(2.0 * S), int(3.0 * S), True, "HTTP 503", 8)
    drill = summarize_drill(records_frame(records), "rate=10", 0, [event], {0: 11}, 1.0)
    (fault,) = drill.faults
    assert fault.recovery_s == pytest.approx(1.3)  # sent 3.1 s, done 3.3 s
    assert fault.failed == 8  # every failure of the window, none after a false recovery
    assert fault.requests_hit == 8  # the target's own count, carried as it said it
