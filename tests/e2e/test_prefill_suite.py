"""``moeperf run prefill`` on the embedded reference engine: TTFT grows with prompt length.

The shipped CI-sized spec sweeps 4 prompt lengths, log-spaced from 16 tokens to the
engine's context limit (2,048 less the one output token), at 1 and 8 streams. Prefill
does more work per token for a longer prompt (attention over all earlier tokens), so at
one stream no length's TTFT may be significantly below a shorter one's, from 81 tokens
on each p50 must be above the shorter one's, and the longest's whole 95% interval above
the shortest's. (A length past the limit, "not available from
this target": tests/integration/test_sweep_synthetic.py.)
"""

from __future__ import annotations

import itertools
import math

import pytest

from moeperf.cli import main
from moeperf.collectors.prefill import prefill_rates
from moeperf.collectors.serving_records import ServingSummary
from moeperf.collectors.store import RunStore

# What the harness's own load does on a busy 2-core host (short 8-stream levels can be
# flagged client-bound) is not these tests' subject.
LENIENT_CLIENT = [
    "--set",
    "harness.max_loop_lag_p99_s=1.0",
    "--set",
    "harness.max_cpu_fraction=1.0",
]


def _summary(runs) -> ServingSummary:
    summary = RunStore(runs).open("latest").summary()
    assert isinstance(summary, ServingSummary) and summary.sweep is not None
    return summary


@pytest.mark.timing
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ttft_grows_with_prompt_length_on_the_reference_target(tmp_path, capsys):
    # 12 requests per level (the spec's 24 halved, for test time): a p50 interval still.
    code = main([
        "--runs-dir", str(tmp_path), "run", "prefill", *LENIENT_CLIENT,
        "--set", "load.max_requests=12",
    ])  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0, printed[-3000:]
    summary = _summary(tmp_path)
    sweep = summary.sweep
    assert sweep is not None
    assert (sweep.context_tokens, sweep.max_output_tokens) == (2048, 1)
    assert [p.input_tokens for p in sweep.points] == [16, 81, 406, 2047]
    assert all(p.not_available is None for p in sweep.points)
    ttft = []
    for point in sweep.points:
        assert point.scenarios == (f"in={point.input_tokens} c=1", f"in={point.input_tokens} c=8")
        for name in point.scenarios:
            entry = summary.scenarios[name]
            assert entry.input_tokens == point.input_tokens
            assert entry.ok == 12 and entry.errors == 0, (name, entry.error_types)
        single = summary.scenarios[point.scenarios[0]]
        p50 = single.latency_s.ttft_s.at(0.5)
        assert p50 is not None and p50.ci_low is not None and p50.ci_high is not None
        ttft.append(p50)
        rates = prefill_rates(single)
        assert rates is not None and rates.per_request_p50_tok_s is not None
        assert math.isclose(rates.per_request_p50_tok_s, point.input_tokens / p50.value)
    # Every prompt is as long as its length says, by the server's own count (usage).
    requests = RunStore(tmp_path).open("latest").requests()
    expected = requests["scenario"].str.extract(r"^in=(\d+) ", expand=False).astype(int)
    assert (requests["prompt_tokens"] == expected).all()
    # 16 and 81 tokens differ by well under a millisecond of prefill here, inside the
    # noise of a busy 2-core host (CI once saw 17.4 ms then 16.9 ms), so a shorter length
    # may not beat a longer one on p50 alone; what must not happen is a significant
    # decrease: a longer prompt's whole 95% interval below the shorter one's.
    for shorter, longer in itertools.pairwise(ttft):
        assert shorter.ci_low is not None and longer.ci_high is not None
        assert longer.ci_high >= shorter.ci_low, ttft
    # From 81 tokens on, the extra work (5x the tokens each step) is far above the noise.
    values = [q.value for q in ttft[1:]]
    assert values == sorted(values) and len(set(values)) == len(values), values
    longest_low, shortest_high = ttft[-1].ci_low, ttft[0].ci_high
    assert longest_low is not None and shortest_high is not None
    assert longest_low > shortest_high, ttft
    assert "sweep over prompt lengths" in printed
