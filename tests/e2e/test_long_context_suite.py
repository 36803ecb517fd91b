"""``moeperf run long-context`` on the embedded reference engine: the KV cache grows with
the context, as the engine's own gauge says.

The shipped CI-sized spec runs one stream at 4 context lengths from 256 tokens to the
engine's raised limit of 4,096 (past the model's trained 2,048: allow_long_max_model_len),
32 output tokens each. One request of prompt P holds ceil(P / 16) KV blocks after its
prefill and ceil((P + 32) / 16) at its last token (blocks of 16 tokens): the highest
scrape of the target's KV usage in a level, times its 1,024 blocks, must lie in that
range, so it grows with the context. TTFT grows with it too.
"""

from __future__ import annotations

import math

import pytest

from collectors.serving_records import ServingSummary
from collectors.store import RunStore
from moeperf.cli import main

BLOCK_TOKENS = 16
OUTPUT_TOKENS = 32


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_kv_usage_grows_with_context_on_the_reference_target(tmp_path, capsys):
    code = main([
        "--runs-dir", str(tmp_path), "run", "long-context",
        "--set", "harness.max_loop_lag_p99_s=1.0", "--set", "harness.max_cpu_fraction=1.0",
    ])  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0, printed[-3000:]
    summary = RunStore(tmp_path).open("latest").summary()
    assert isinstance(summary, ServingSummary) and summary.sweep is not None
    assert summary.sweep.context_tokens == 4096
    lengths = [p.input_tokens for p in summary.sweep.points]
    assert lengths[0] == 256 and lengths[-1] == 4096 - OUTPUT_TOKENS
    blocks, ttft = [], []
    for point in summary.sweep.points:
        (name,) = point.scenarios
        entry = summary.scenarios[name]
        assert entry.ok == 6 and entry.errors == 0, (name, entry.error_types)
        counters = entry.target_counters
        assert counters is not None and counters.kv_blocks_total == 1024
        used = counters.kv_blocks_used_max
        assert used is not None
        low = math.ceil(point.input_tokens / BLOCK_TOKENS)
        high = math.ceil((point.input_tokens + OUTPUT_TOKENS) / BLOCK_TOKENS)
        assert low <= used <= high, (point.input_tokens, used, low, high)
        assert counters.preemptions == 0
        blocks.append(used)
        p50 = entry.latency_s.ttft_s.value_at(0.5)
        assert p50 is not None
        ttft.append(p50)
    assert blocks == sorted(blocks) and len(set(blocks)) == len(blocks), blocks
    assert ttft == sorted(ttft), ttft
