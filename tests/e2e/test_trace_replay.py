"""``moeperf run trace-replay`` on the embedded reference engine: the shipped trace is
replayed as recorded.

Three things must be reproduced: the request count; the send times (each request's
recorded time divided by the speed-up); and the trace's prefix sharing, whose ground truth
is computed here from the trace's own hash ids: the share of prompt tokens lying in leading
blocks an earlier request already had, the hit rate a prefix cache that never evicts would
reach. The sends must keep to their times: never early, the median well within a
millisecond, and at least 95% within 5 ms (not all: on 2 cores shared with the engine the
OS now and then leaves the load worker off a core for a few ms; a CI run saw one send of
60 at 5.3 ms). The light synthetic target checks the same in
tests/integration/test_workload_synthetic.py.
"""

from __future__ import annotations

import pytest

from moeperf.cli import main
from moeperf.collectors.serving_records import ServingSummary
from moeperf.collectors.store import RunStore
from moeperf.suites.serving.workload.prompts import trace_path
from moeperf.suites.serving.workload.trace import Trace, read_trace

SPEEDUP = 2.0


def ideal_hit_ratio(trace: Trace, block_tokens: int) -> float:
    seen: set[tuple[int, ...]] = set()
    shared = total = 0
    for request in trace.requests:
        full = request.input_tokens // block_tokens
        k = 0
        while k < full and request.hash_ids[: k + 1] in seen:
            k += 1
        shared += k * block_tokens
        total += request.input_tokens
        seen.update(request.hash_ids[: i + 1] for i in range(full))
    return shared / total


@pytest.mark.timing
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_trace_is_replayed_at_its_times_with_its_prefix_sharing(tmp_path, capsys):
    # One level, at twice the recorded speed, for test time.
    code = main([
        "--runs-dir", str(tmp_path), "run", "trace-replay", "--set", f"load.levels=[{SPEEDUP}]",
    ])  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0, printed[-3000:]
    trace = read_trace(trace_path("traces/small-mooncake.jsonl"))
    summary = RunStore(tmp_path).open("latest").summary()
    assert isinstance(summary, ServingSummary)
    entry = summary.scenarios["trace x2"]
    assert entry.requests == trace.count == 60 and entry.ok == 60
    replay = entry.trace_replay
    assert replay is not None and replay.sent == 60
    assert replay.on_time_ratio is not None and replay.on_time_ratio >= 0.95

    requests = RunStore(tmp_path).open("latest").requests().sort_values("intended_send_ns")
    intended = requests["intended_send_ns"].to_numpy()
    offsets_s = (intended - intended[0]) / 1e9
    recorded_s = [r.timestamp_s / SPEEDUP for r in trace.requests]
    assert offsets_s == pytest.approx(recorded_s, abs=1e-6)
    lag_s = (requests["send_ns"] - requests["intended_send_ns"]) / 1e9
    # Never before its time (the worker waits for it), and mostly well within a millisecond.
    assert (lag_s >= 0).all() and lag_s.median() < 0.001, lag_s.describe()
    # Every prompt as long as the trace says, by the server's own count (usage).
    expected = [r.input_tokens for r in trace.requests]
    assert requests["prompt_tokens"].tolist() == expected

    counters = entry.target_counters
    assert counters is not None and counters.prefix_cache_hit_ratio is not None
    ideal = ideal_hit_ratio(trace, 64)
    assert ideal > 0.3  # the shipped trace shares prefixes (its README)
    assert 0.8 * ideal <= counters.prefix_cache_hit_ratio <= ideal + 0.05, (
        counters.prefix_cache_hit_ratio,
        ideal,
    )
    assert "trace replay: sends against the trace's times" in printed
