"""Configs and deployments the planner cannot use: a message naming the mismatch, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from moeperf.cli import main
from moeperf.suites.plan.deploy import parse_deploy
from moeperf.suites.plan.errors import PlanError
from moeperf.suites.plan.model_config import load_model_config, parse_model_config
from moeperf.suites.plan.plan import plan_memory

DATA = Path(__file__).parents[1] / "data" / "plan"
MIXTRAL = DATA / "mixtral-8x7b.json"


def _deploy(**changes):
    base = {
        "devices": 8,
        "memory_per_device_gib": 80.0,
        "tp": 8,
        "ep": 8,
        "max_context_tokens": 32768,
        "max_running_requests": 16,
    }
    return parse_deploy({**base, **changes})


def test_missing_fields_are_named():
    raw = json.loads(MIXTRAL.read_text())
    del raw["num_local_experts"], raw["hidden_size"]
    with pytest.raises(PlanError, match=r"missing.*hidden_size.*num_local_experts"):
        parse_model_config(raw)


def test_unknown_architecture_names_the_known_ones():
    with pytest.raises(PlanError, match=r"unknown model_type 'llama4'.*deepseek_v3.*mixtral"):
        parse_model_config({"model_type": "llama4", "architectures": ["Llama4ForCausalLM"]})


def test_experts_not_divisible_by_ep():
    shape = load_model_config(DATA / "qwen3-30b-a3b.json")  # 128 experts
    with pytest.raises(PlanError, match=r"experts \(128\) are not divisible by ep \(6\)"):
        plan_memory(shape, _deploy(devices=6, tp=2, dp=3, ep=6))


def test_heads_not_divisible_by_tp():
    shape = load_model_config(MIXTRAL)  # 32 heads
    with pytest.raises(PlanError, match=r"attention heads \(32\) are not divisible by tp \(3\)"):
        plan_memory(shape, _deploy(devices=3, tp=3, ep=1))


def test_deployment_layout_errors_name_the_rule():
    with pytest.raises(PlanError, match=r"devices \(8\) must equal tp \* pp \* dp"):
        _deploy(tp=4)
    with pytest.raises(PlanError, match=r"ep \(16\) must divide tp \* dp \(8\)"):
        _deploy(ep=16)
    with pytest.raises(PlanError, match="weight_dtype"):
        _deploy(weight_dtype="int8")


def test_kimi_linear_layers_and_missing_linear_fields():
    linear: dict[str, object] = {
        "kda_layers": [1, 2, 3],
        "full_attn_layers": [4],
        "num_heads": 4,
        "head_dim": 16,
        "short_conv_kernel_size": 4,
    }
    raw = {
        "model_type": "kimi_linear",
        "num_hidden_layers": 4,
        "hidden_size": 64,
        "vocab_size": 256,
        "num_attention_heads": 4,
        "kv_lora_rank": 32,
        "q_lora_rank": None,
        "qk_nope_head_dim": 16,
        "qk_rope_head_dim": 8,
        "v_head_dim": 16,
        "intermediate_size": 128,
        "moe_intermediate_size": 32,
        "num_experts": 8,
        "num_experts_per_token": 2,
        "num_shared_experts": 1,
        "first_k_dense_replace": 1,
        "linear_attn_config": linear,
    }
    shape = parse_model_config(raw)
    assert shape.linear_layers == (True, True, True, False)
    assert shape.moe_layers == (False, True, True, True)
    del linear["head_dim"]
    with pytest.raises(PlanError, match=r"linear_attn_config\.head_dim"):
        parse_model_config(raw)


def _write(tmp_path: Path, **deploy) -> Path:
    path = tmp_path / "deploy.json"
    path.write_text(json.dumps(deploy))
    return path


def test_cli_exit_codes(tmp_path, capsys):
    base = {
        "devices": 8,
        "memory_per_device_gib": 80.0,
        "tp": 8,
        "ep": 8,
        "max_context_tokens": 32768,
        "max_running_requests": 16,
    }
    out = tmp_path / "plan.json"
    argv = ["plan", "memory", "--model", str(MIXTRAL), "--deploy"]
    assert main([*argv, str(_write(tmp_path, **base)), "--json", str(out)]) == 0
    assert json.loads(out.read_text())["fits"] is True
    small = {**base, "memory_per_device_gib": 8.0, "max_context_tokens": 1_000_000}
    assert main([*argv, str(_write(tmp_path, **small))]) == 1
    assert "over budget" in capsys.readouterr().out
    assert main([*argv, str(_write(tmp_path, **{**base, "devices": 3, "tp": 3, "ep": 3}))]) == 2
    err = " ".join(capsys.readouterr().err.split())  # rich wraps long lines
    assert "attention heads (32) are not divisible by tp (3)" in err
    assert "experts (8) are not divisible by ep (3)" in err


def test_over_budget_names_the_overflowing_component_and_changes_that_fit():
    shape = load_model_config(DATA / "qwen3-30b-a3b.json")
    tight = _deploy(
        devices=1,
        tp=1,
        ep=1,
        memory_per_device_gib=40.0,
        max_running_requests=1,
        max_context_tokens=4096,
    )
    plan = plan_memory(shape, tight)  # 61 GB of bf16 weights on one 40 GiB device
    assert not plan.fits and plan.free_for_cache < 0
    assert plan.overflow is not None and "largest is weights.routed_experts" in plan.overflow
    descriptions = [c.description for c in plan.changes]
    assert "weight_dtype bf16 -> fp8" in descriptions
    assert "weight_dtype bf16 -> int4" in descriptions
    for change in plan.changes:
        assert change.sequences_at_max_context >= 1
