"""The planner's activation estimate against the reference engine's measured peak, and the
meter itself (``benchmarks/live_tensors.py``) against allocations of known size."""

from __future__ import annotations

import pytest
import torch
from live_tensors import LiveTensorBytes
from plan_check import ACTIVATION_TOLERANCE, CASES, TORCH_DTYPES, measure

from moeperf.suites.plan.model_config import load_model_config
from moeperf.targets.model.checkpoint import default_model_dir, load_mixtral_dir


def test_the_meter_counts_what_is_alive_at_once():
    with LiveTensorBytes() as live:
        a = torch.ones(1000)  # 4,000 bytes
        b = torch.ones(500, dtype=torch.float64)  # 4,000 bytes: 8,000 at once
        a.view(10, 100).add_(1)  # a view and an in-place result: nothing new
        del a, b
        c = torch.ones(250)  # 1,000 bytes, after both were freed
        peak_then = live.peak_bytes
        current = live.current_bytes
    assert peak_then == 8000
    assert current == 1000
    del c


@pytest.fixture(scope="module")
def shape():
    return load_model_config(default_model_dir() / "config.json")


# A prefill chunk and a decode batch, fp32 and bf16, with and without MTP drafts. Those
# with several requests running take 6-9 s each: slow, out of the inner loop.
CHECKED = [
    pytest.param(case, id=case.label, marks=[pytest.mark.slow] if case.running > 1 else [])
    for case in (CASES[0], CASES[3], CASES[5], CASES[6])
]


@pytest.mark.parametrize("case", CHECKED)
def test_activations_are_within_the_stated_tolerance_of_the_engines_peak(shape, case):
    model, _ = load_mixtral_dir(default_model_dir(), dtype=TORCH_DTYPES[case.dtype])
    measured = measure(model, shape, case)
    assert measured.weight_bytes == measured.plan.weights.device_bytes
    assert measured.kv_bytes_per_token == measured.plan.cache.bytes_per_token
    assert abs(measured.activation_ratio - 1) <= ACTIVATION_TOLERANCE, (
        measured.plan.activations,
        measured.activation_peak_bytes,
    )
