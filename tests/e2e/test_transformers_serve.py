"""moeperf against a real third-party server: Hugging Face ``transformers serve``.

The server (transformers pinned in the test extra) serves the shipped model directory on
127.0.0.1, on CPU, with continuous batching and a bounded KV cache. It streams as it does
for users: a role-only first chunk, one token per content chunk, usage on the
finish_reason chunk whatever stream_options asked, and no ``data: [DONE]``; it has no
/metrics and no /tokenize, and refuses ``ignore_eos`` with HTTP 422. ``moeperf run`` sweeps
1 and 4 streams of chat requests against it as a user would (the CLI, a spec file).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from collectors.serving_records import ServingSummary
from collectors.store import RunStore
from moeperf.bench.transformers_serve import TransformersServe, running

REPO_ROOT = Path(__file__).resolve().parents[2]
MODEL_DIR = REPO_ROOT / "targets" / "model" / "default"
ENV = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONIOENCODING": "utf-8"}
REQUESTS_PER_LEVEL = 8
OUTPUT_TOKENS = 32


@pytest.fixture(scope="module")
def transformers_url() -> Iterator[str]:
    with running(TransformersServe(MODEL_DIR)) as url:
        yield url


def spec_text(url: str) -> str:
    # ignore_eos off: transformers serve answers 422 to it. Its tokenizer is the model
    # directory's own (it has no /tokenize).
    return f"""
suite = "serving"
name = "transformers-serve"
[target]
kind = "url"
url = "{url}"
api = "chat"
ignore_eos = false
[workload]
tokenizer = "{MODEL_DIR}"
num_prompts = 32
[workload.input_tokens]
mean = 128
[workload.output_tokens]
mean = {OUTPUT_TOKENS}
[load]
mode = "concurrency"
levels = [1, 4]
max_requests = {REQUESTS_PER_LEVEL}
warmup_s = 0
"""


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_sweep_against_transformers_serve_completes_with_exact_tokens(transformers_url, tmp_path):
    spec = tmp_path / "transformers-serve.toml"
    spec.write_text(spec_text(transformers_url), encoding="utf-8")
    runs = tmp_path / "runs"
    result = subprocess.run(
        [sys.executable, "-m", "moeperf.cli", "--runs-dir", str(runs), "run", str(spec)],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env=ENV,
        timeout=540,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    # No /metrics there: said plainly, per level, and the run is complete all the same.
    assert "target counters: not available (HTTP 404" in result.stdout

    reader = RunStore(runs).open("latest")
    assert reader.manifest.status == "complete"
    frame = reader.requests()
    assert len(frame) == 2 * REQUESTS_PER_LEVEL
    assert (frame["status"] == "ok").all(), frame[["status", "error_message"]]
    # It closes each stream after the finish_reason chunk, without [DONE].
    assert (frame["stream_end"] == "finish_reason").all()
    for record in frame.itertuples():
        # output_tokens is the server's usage. The server sends one chunk per token
        # between the role chunk and the finish_reason chunk (a token whose text is still
        # incomplete comes as empty content), so the chunks the harness timestamped
        # confirm the count independently.
        assert record.output_tokens is not None and 1 <= record.output_tokens <= OUTPUT_TOKENS
        assert len(record.chunk_ns) == record.output_tokens + 2
        assert record.output_tokens - 2 <= sum(record.chunk_tokens) <= record.output_tokens
        assert record.prompt_tokens is not None and record.prompt_tokens > 0
        # The role-only first chunk is no token: the first token came after it.
        assert record.chunk_tokens[0] == 0
        assert record.first_token_ns > record.chunk_ns[0]

    summary = reader.summary()
    assert isinstance(summary, ServingSummary)
    for scenario in ("c=1", "c=4"):
        entry = summary.scenarios[scenario]
        assert entry.status == "ok"
        assert entry.target_counters is None
        ttft_p50 = entry.latency_s.ttft_s.value_at(0.5)
        tpot_p50 = entry.latency_s.tpot_s.value_at(0.5)
        assert ttft_p50 is not None and tpot_p50 is not None
        # Positive and plausible for a 7M-parameter model on a CPU: well under a
        # second to the first token, and a few ms to a few hundred per token.
        assert 0 < ttft_p50 < 5.0, ttft_p50
        assert 0.001 < tpot_p50 < 1.0, tpot_p50
