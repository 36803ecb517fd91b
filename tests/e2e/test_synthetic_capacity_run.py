"""``moeperf run synthetic`` against a synthetic target with a known capacity: 4 streams.

At the capacity TTFT is the configured one; above it requests wait for a slot, so the
harness must see TTFT jump by about one request's duration. This is the
ground truth an SLO capacity search is checked against.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from moeperf.collectors.serving_records import ServingSummary
from moeperf.collectors.store import RunStore

REPO_ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONIOENCODING": "utf-8"}
TTFT_S = 0.05
ITL_S = 0.01
OUTPUT_TOKENS = 20
REQUEST_S = TTFT_S + (OUTPUT_TOKENS - 1) * ITL_S  # 0.24 s from start to last token
CAPACITY_RUN = [
    "--set", "target.synthetic.max_concurrent_streams=4",
    "--set", f"target.synthetic.ttft_s={TTFT_S}", "--set", f"target.synthetic.itl_s={ITL_S}",
    "--set", "target.synthetic.jitter=none", "--set", "target.synthetic.jitter_scale=0",
    "--set", f"workload.output_tokens.mean={OUTPUT_TOKENS}",
    "--set", "workload.output_tokens.spread=0",
    "--set", "load.levels=[4,8]", "--set", "load.duration_s=3",
    "--set", "load.warmup_s=0.5", "--set", "load.cooldown_s=0.2",
]  # fmt: skip


@pytest.mark.timing
@pytest.mark.slow
def test_ttft_jumps_by_a_request_duration_above_the_capacity(tmp_path):
    runs = tmp_path / "runs"
    result = subprocess.run(
        [sys.executable, "-m", "moeperf.cli", "--runs-dir", str(runs), "run", "synthetic",
         *CAPACITY_RUN],
        cwd=REPO_ROOT, env=ENV, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    (run_id,) = RunStore(runs).run_ids()
    reader = RunStore(runs).open(run_id)
    # Exit 0 for a complete run, 1 for one that ended failed or invalid (a level above the
    # capacity may miss its SLO): the code follows the run's status exactly.
    status = reader.manifest.status
    assert status in ("complete", "failed", "invalid"), status
    assert result.returncode == (0 if status == "complete" else 1), result.stdout + result.stderr
    assert reader.manifest.spec_resolved["target"]["synthetic"]["max_concurrent_streams"] == 4
    summary = reader.summary()
    assert isinstance(summary, ServingSummary)
    at_capacity = summary.scenarios["c=4"].latency_s.ttft_s
    above = summary.scenarios["c=8"].latency_s.ttft_s
    assert at_capacity.count > 0 and above.count > 0
    p50_at_capacity, p50_above = at_capacity.value_at(0.5), above.value_at(0.5)
    assert p50_at_capacity is not None and p50_above is not None
    # c=4: every request has a slot at once.
    assert p50_at_capacity == pytest.approx(TTFT_S, abs=0.04)
    # c=8, closed loop: 4 stream, 4 wait; a request sent as another ends queues behind
    # the 3 still waiting plus the one just handed the slot, i.e. it waits for 4 ends,
    # one request's duration. So (nearly) every TTFT is that wait plus TTFT_S.
    assert p50_above > p50_at_capacity + 0.15
    assert p50_above == pytest.approx(REQUEST_S + TTFT_S, abs=0.06)
