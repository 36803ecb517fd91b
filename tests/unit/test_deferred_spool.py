"""DeferredSpool: results left for client-side counts come back whole, in order, once."""

from __future__ import annotations

from moeperf.collectors.records import RequestRecord
from moeperf.suites.serving.load.deferred import DeferredSpool
from moeperf.suites.serving.load.stream_state import StreamResult


def result(i: int) -> StreamResult:
    record = RequestRecord(
        request_id=f"w0-{i}", scenario="c=2", phase="measure", worker=0,
        intended_send_ns=i, send_ns=i, done_ns=i + 9, status="ok",
        chunk_ns=[i + 1, i + 2, i + 3], chunk_tokens=[0, 1, 1],
    )  # fmt: skip
    return StreamResult(record, ["", f"tok{i}", " é"], counts_unknown=bool(i % 2))


def test_results_come_back_equal_in_order_and_in_batches():
    spool = DeferredSpool()
    for i in range(7):
        spool.add(result(i))
    batches = list(spool.drain(3))
    assert [len(b) for b in batches] == [3, 3, 1]
    assert [r for b in batches for r in b] == [result(i) for i in range(7)]
    spool.close()


def test_a_drain_empties_the_spool_for_the_next_level_even_when_stopped_early():
    spool = DeferredSpool()
    for i in range(5):
        spool.add(result(i))
    first = spool.drain(2)
    next(first)
    first.close()  # the caller stopped after one batch
    assert spool.count == 0
    assert list(spool.drain(2)) == []
    spool.add(result(9))
    assert list(spool.drain(2)) == [[result(9)]]
    spool.close()
