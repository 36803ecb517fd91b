"""The planner's parameter counts against real models' published ones (within 1%)."""

from __future__ import annotations

from pathlib import Path

import pytest

from moeperf.suites.plan.deploy import load_deploy, parse_deploy
from moeperf.suites.plan.model_config import load_model_config
from moeperf.suites.plan.plan import plan_memory
from moeperf.suites.plan.weights import plan_weights

DATA = Path(__file__).parents[1] / "data" / "plan"
ONE = parse_deploy(
    {
        "devices": 1,
        "memory_per_device_gib": 80.0,
        "max_context_tokens": 4096,
        "max_running_requests": 8,
    }
)


@pytest.mark.parametrize(
    ("name", "main", "total"),
    [
        ("mixtral-8x7b", 46.7e9, 46.7e9),
        ("qwen3-30b-a3b", 30.5e9, 30.5e9),
        ("deepseek-v3", 671e9, 685e9),
        ("qwen3-next-80b-a3b", 80e9, 80e9),
    ],
)
def test_parameters_within_one_percent_of_published(name, main, total):
    weights = plan_weights(load_model_config(DATA / f"{name}.json"), ONE)
    assert weights.main_params == pytest.approx(main, rel=0.01)
    assert weights.total_params == pytest.approx(total, rel=0.01)


def test_deepseek_layers_and_mla_cache():
    shape = load_model_config(DATA / "deepseek-v3.json")
    assert shape.moe_layers.count(False) == 3 and shape.mtp_depth == 1
    deploy = parse_deploy(
        {
            "devices": 16,
            "memory_per_device_gib": 141.0,
            "tp": 8,
            "dp": 2,
            "ep": 16,
            "weight_dtype": "fp8",
            "max_context_tokens": 32768,
            "max_running_requests": 8,
        }
    )
    plan = plan_memory(shape, deploy)
    # MLA: (kv_lora_rank 512 + qk_rope 64) * 2 bytes per layer, whole on every tp rank
    assert plan.cache.kv_bytes_per_token_per_layer == 576 * 2
    assert plan.cache.attention_layers_per_device == 61  # no drafts: no MTP cache
    assert plan.fits


def test_qwen3_next_hybrid_cache():
    shape = load_model_config(DATA / "qwen3-next-80b-a3b.json")
    assert shape.num_full_attention_layers == 12 and shape.num_linear_layers == 36
    deploy = parse_deploy(
        {
            "devices": 4,
            "memory_per_device_gib": 80.0,
            "tp": 4,
            "max_context_tokens": 262144,
            "max_running_requests": 4,
        }
    )
    c = plan_memory(shape, deploy).cache
    assert c.kv_heads_replicated  # 2 kv heads, tp 4: each device keeps one
    assert c.bytes_per_token == 12 * 2 * 1 * 256 * 2
    recurrent = 32 * 128 * 128 * 4  # fp32 state
    conv = 3 * (2 * 16 * 128 + 32 * 128) * 2
    assert c.state_bytes_per_sequence == 36 * (recurrent + conv) // 4


def test_worked_example_of_the_readme():
    examples = Path(__file__).parents[2] / "suites" / "plan" / "examples"
    shape = load_model_config(examples / "moe-2.8t.json")
    plan = plan_memory(shape, load_deploy(examples / "ep96-1m.toml"))
    assert plan.weights.total_params == pytest.approx(2.85e12, rel=0.01)
    assert plan.cache.bytes_per_token == 62 * 576 * 2  # 61 layers + the MTP layer, MLA, bf16
    assert not plan.fits and plan.sequences_at_max_context == 1
    assert plan.overflow is not None and plan.overflow.startswith("kv cache: 22 sequences")
    assert any(c.description.startswith("max_context_tokens") for c in plan.changes)
