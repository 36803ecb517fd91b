"""The memory planner's check of a deployment sweep's arms (suites/serving/deploy_sweep/
plan_check.py): each arm's deployment is [plan]'s with the arm's knobs over the fields they
set, and the spec's [plan] and plan_fields are checked when it loads (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from moeperf.specs import load_spec
from moeperf.suites.errors import SpecError
from moeperf.suites.plan.deploy import parse_deploy
from moeperf.suites.plan.model_config import load_model_config
from moeperf.suites.serving.deploy_sweep.plan_check import arm_deployment, check_arm, knob_fields
from moeperf.suites.serving.spec import ServingSpec

QWEN = load_model_config(Path("tests/data/plan/qwen3-30b-a3b.json"))
# One 80 GiB device, bf16: Qwen3-30B-A3B's ~61 GB of weights fit, with room for a cache.
H100 = parse_deploy({
    "devices": 1, "memory_per_device_gib": 80, "max_context_tokens": 32768,
    "max_running_requests": 8,
})  # fmt: skip


def test_vllm_flags_set_the_fields_they_name_and_tp_sets_the_devices():
    fields = knob_fields(["tensor_parallel_size", "max_num_seqs", "gpu_memory_utilization"], {})
    assert fields == {"tensor_parallel_size": "tp", "max_num_seqs": "max_running_requests"}
    raw = arm_deployment(H100, {"tensor_parallel_size": 4, "max_num_seqs": 256}, fields)
    assert (raw["tp"], raw["devices"], raw["max_running_requests"]) == (4, 4, 256)
    assert raw["memory_per_device_gib"] == 80  # what the arm does not set stays [plan]'s


def test_plan_fields_name_a_knob_the_table_does_not_know():
    fields = knob_fields(["seqs"], {"seqs": "max_running_requests"})
    assert arm_deployment(H100, {"seqs": 3}, fields)["max_running_requests"] == 3


def test_an_arm_whose_cache_cannot_hold_its_requests_does_not_fit_and_a_smaller_one_does():
    fields = knob_fields(["max_num_seqs"], {})
    small = check_arm(QWEN, H100, {"max_num_seqs": 4}, fields)  # 5 fit at full context
    assert small.fits and small.why.startswith("fits: ")
    big = check_arm(QWEN, H100, {"max_num_seqs": 1024}, fields)
    assert not big.fits
    assert big.why.startswith("kv cache: 1024 sequences (of 1024 over dp 1) of 32,768 tokens")


def test_an_arm_the_planner_refuses_is_not_run_with_its_reason():
    fields = knob_fields(["tensor_parallel_size"], {})
    refused = check_arm(QWEN, H100, {"tensor_parallel_size": 3}, fields)
    assert not refused.fits
    assert refused.why.startswith("the planner refuses it: ")
    assert "not divisible by tp (3)" in refused.why


SWEEP = """
[target]
kind = "reference"
[load]
mode = "concurrency"
levels = [2]
duration_s = 2.0
[deploy_sweep]
grid = { max_running_requests = [2, 8] }
ttft_p99_s = 1.0
"""
DEPLOYMENT = """
[plan.deployment]
devices = 1
memory_per_device_gib = 1
max_context_tokens = 2048
max_running_requests = 8
"""


def spec_of(tmp_path, text: str) -> str:
    path = tmp_path / "spec.toml"
    path.write_text('name = "t"\n' + text)
    return str(path)


def test_a_deployment_beside_a_deploy_sweep_loads(tmp_path):
    spec = load_spec(spec_of(tmp_path, SWEEP + DEPLOYMENT)).spec
    assert isinstance(spec, ServingSpec) and spec.plan is not None
    assert spec.plan.deployment["memory_per_device_gib"] == 1


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ('plan_fields = { max_running_requests = "max_running_requests" }\n',
         r"deploy_sweep\.plan_fields is for the memory planner's check: add \[plan\]"),
        ("[plan]\n", r"\[plan\] beside \[deploy_sweep\] checks each arm's memory .* give the "
                     r"deployment"),
        ('plan_fields = { threads = "tp" }\n' + DEPLOYMENT,
         r"deploy_sweep\.plan_fields: threads is not a knob of the sweep \(valid: "
         r"max_running_requests\)"),
        ('plan_fields = { max_running_requests = "running" }\n' + DEPLOYMENT,
         r"deploy_sweep\.plan_fields\.max_running_requests: 'running' is not a deployment "
         r"field an arm can set; valid: .*max_running_requests"),
    ],
)  # fmt: skip
def test_a_plan_the_sweep_cannot_use_is_refused_naming_what_to_give(tmp_path, extra, message):
    with pytest.raises(SpecError, match=message):
        load_spec(spec_of(tmp_path, SWEEP + extra))
