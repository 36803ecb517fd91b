"""The planner against the reference engine's real allocations (exact, in bytes)."""

from __future__ import annotations

from typing import Literal

import pytest
import torch

from moeperf.suites.plan.deploy import parse_deploy
from moeperf.suites.plan.model_config import load_model_config
from moeperf.suites.plan.plan import plan_memory
from moeperf.targets.model.checkpoint import default_model_dir, load_mixtral_dir
from moeperf.targets.serving.engine.api import EngineConfig
from moeperf.targets.serving.engine.engine import Engine

TORCH = {"fp32": torch.float32, "bf16": torch.bfloat16}
ENGINE: dict[str, Literal["float32", "bfloat16"]] = {"fp32": "float32", "bf16": "bfloat16"}


def _deploy(dtype: str, drafts: int):
    return parse_deploy(
        {
            "devices": 1,
            "memory_per_device_gib": 1.0,
            "weight_dtype": dtype,
            "kv_dtype": dtype,
            "activation_dtype": "bf16",
            "max_context_tokens": 2048,
            "max_running_requests": 32,
            "chunked_prefill_tokens": 256,
            "mtp_drafts": drafts,
            "layout": "reference",
        }
    )


@pytest.fixture(scope="module")
def shape():
    return load_model_config(default_model_dir() / "config.json")


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_weights_equal_the_loaded_model(shape, dtype):
    model, _ = load_mixtral_dir(default_model_dir(), dtype=TORCH[dtype])
    plan = plan_memory(shape, _deploy(dtype, 0))
    params = sum(p.numel() for p in model.parameters())
    mtp_params = sum(p.numel() for p in model.mtp.parameters())
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters())
    assert plan.weights.total_params == params == 6_993_408
    assert plan.weights.params_total["mtp"] == mtp_params
    assert plan.weights.main_params == params - mtp_params
    assert plan.weights.device_bytes == nbytes


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("drafts", [0, 2])
def test_kv_bytes_per_token_equal_the_engines_cache(shape, dtype, drafts):
    model, _ = load_mixtral_dir(default_model_dir())
    config = EngineConfig(dtype=ENGINE[dtype], mtp_tokens=drafts, num_kv_blocks=4, block_size=16)
    cache = Engine(model, config).cache
    tensors = [cache.k, cache.v] + ([cache.hidden] if cache.hidden is not None else [])
    per_token = sum(t.numel() * t.element_size() for t in tensors) // (4 * 16)
    plan = plan_memory(shape, _deploy(dtype, drafts))
    assert plan.cache.bytes_per_token == per_token
    # the engine's slots: 4 main layers + 1 MTP module, always; the hidden state with MTP on
    assert plan.cache.attention_layers_per_device == cache.k.shape[0] == 5
