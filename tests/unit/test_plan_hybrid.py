"""The planner against the reference engine serving the shipped hybrid (Qwen3-Next) model:
weight bytes, KV bytes per token and linear-state bytes per sequence, exact."""

from __future__ import annotations

import json
from typing import Literal

import pytest
import torch

from moeperf.suites.plan.deploy import parse_deploy
from moeperf.suites.plan.model_config import load_model_config
from moeperf.suites.plan.plan import plan_memory
from moeperf.targets.model.checkpoint import hybrid_model_dir
from moeperf.targets.model.hybrid import HybridMoETransformer
from moeperf.targets.model.hybrid_config import HybridConfig
from moeperf.targets.serving.engine.api import EngineConfig
from moeperf.targets.serving.engine.engine import Engine

ENGINE: dict[str, Literal["float32", "bfloat16"]] = {"fp32": "float32", "bf16": "bfloat16"}


CONFIG = hybrid_model_dir() / "config.json"


@pytest.fixture(scope="module")
def model() -> HybridMoETransformer:
    torch.manual_seed(0)  # the shapes are the shipped model's; the values do not matter here
    return HybridMoETransformer(HybridConfig.from_hf(json.loads(CONFIG.read_text())))


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("drafts", [0, 2])
def test_weights_kv_and_state_equal_the_engines_allocations(model, dtype, drafts):
    shape = load_model_config(CONFIG)
    engine = Engine(
        model, EngineConfig(dtype=ENGINE[dtype], mtp_tokens=drafts, num_kv_blocks=4, block_size=16)
    )
    deploy = parse_deploy(
        {
            "devices": 1,
            "memory_per_device_gib": 1.0,
            "weight_dtype": dtype,
            "kv_dtype": dtype,
            "activation_dtype": dtype,
            "max_context_tokens": 2048,
            "max_running_requests": 32,
            "mtp_drafts": drafts,
            "layout": "reference",
        }
    )
    plan = plan_memory(shape, deploy, suggest=False)
    params = list(engine.model.parameters())
    assert plan.weights.total_params == sum(p.numel() for p in params)
    assert plan.weights.device_bytes == sum(p.numel() * p.element_size() for p in params)
    assert plan.cache.bytes_per_token == engine.cache.bytes_per_block // 16
    # 1 full-attention layer + the MTP module's: 2 slots of K and V (+ the hidden state)
    assert plan.cache.attention_layers_per_device == engine.cache.k.shape[0] == 2
    assert engine.linear is not None
    assert plan.cache.state_bytes_per_sequence == engine.linear.bytes_per_sequence
    assert plan.cache.linear_layers_per_device == len(engine.linear.conv) == 3
