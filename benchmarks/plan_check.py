"""``python benchmarks/plan_check.py``: the memory planner against the reference engine.

For each deployment of the shipped model (dtype, context, output tokens, prefill chunk,
running requests, MTP drafts) the engine serves that many requests whose prompt and output
fill the context, on one device (``layout = "reference"``), and the table gives:

- weights: the planner's bytes and ``sum(numel x element_size)`` of the loaded model;
- KV cache: the planner's bytes per token and the engine's cache tensors / their slots;
- activations: the planner's estimate of the largest step and the measured peak of live
  tensors over every engine step (``benchmarks/live_tensors.py``), and their ratio.

Weights and KV must be equal; the activations' stated tolerance is measured / planned
within 1 +- ``ACTIVATION_TOLERANCE`` (tests/unit/test_plan_activations.py checks four of
these deployments).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from live_tensors import LiveTensorBytes
from rich.console import Console
from rich.table import Table

from moeperf.suites.plan.deploy import parse_deploy
from moeperf.suites.plan.model_config import ModelShape, load_model_config
from moeperf.suites.plan.plan import Plan, plan_memory
from moeperf.targets.model.checkpoint import default_model_dir, load_mixtral_dir
from moeperf.targets.model.model import MoETransformer
from moeperf.targets.serving.engine.api import EngineConfig, SamplingParams
from moeperf.targets.serving.engine.engine import Engine

ACTIVATION_TOLERANCE = 0.15
Dtype = Literal["fp32", "bf16"]
TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
ENGINE_DTYPES: dict[Dtype, Literal["float32", "bfloat16"]] = {
    "fp32": "float32",
    "bf16": "bfloat16",
}


@dataclass(frozen=True)
class Case:
    dtype: Dtype
    context_tokens: int
    output_tokens: int
    chunk_tokens: int
    running: int
    drafts: int

    @property
    def label(self) -> str:
        return (
            f"{self.dtype} ctx {self.context_tokens} chunk {self.chunk_tokens} "
            f"R {self.running} drafts {self.drafts}"
        )


CASES = (
    Case("fp32", 512, 16, 256, 1, 0),
    Case("fp32", 2048, 16, 256, 1, 0),
    Case("fp32", 1024, 16, 512, 1, 0),
    Case("fp32", 512, 32, 128, 8, 0),
    Case("bf16", 512, 32, 128, 8, 0),
    Case("fp32", 512, 32, 128, 8, 2),
    Case("bf16", 1024, 16, 256, 4, 2),
    Case("fp32", 256, 64, 64, 16, 0),
)


@dataclass(frozen=True)
class Measured:
    case: Case
    plan: Plan
    weight_bytes: int
    kv_bytes_per_token: int
    activation_peak_bytes: int

    @property
    def activation_ratio(self) -> float:
        return self.activation_peak_bytes / self.plan.activations.bytes


def plan_for(shape: ModelShape, case: Case) -> Plan:
    deploy = parse_deploy(
        {
            "devices": 1,
            "memory_per_device_gib": 1.0,
            "weight_dtype": case.dtype,
            "kv_dtype": case.dtype,
            "activation_dtype": case.dtype,
            "max_context_tokens": case.context_tokens,
            "max_running_requests": case.running,
            "chunked_prefill_tokens": case.chunk_tokens,
            "mtp_drafts": case.drafts,
            "layout": "reference",
        }
    )
    return plan_memory(shape, deploy, suggest=False)


def engine_for(model: MoETransformer, case: Case) -> Engine:
    blocks_per_request = -(-case.context_tokens // 16) + 1
    config = EngineConfig(
        num_kv_blocks=case.running * blocks_per_request,
        block_size=16,
        chunked_prefill_size=case.chunk_tokens,
        max_num_batched_tokens=max(case.chunk_tokens, case.running * (1 + case.drafts)),
        max_context_len=case.context_tokens,
        max_running_requests=case.running,
        mtp_tokens=case.drafts,
        dtype=ENGINE_DTYPES[case.dtype],
        enable_prefix_caching=False,  # every request's prompt is prefilled
    )
    return Engine(model, config)


def measure(model: MoETransformer, shape: ModelShape, case: Case) -> Measured:
    """Serve ``case.running`` requests that fill the context, measuring every step."""
    engine = engine_for(model, case)
    vocab = model.config.vocab_size
    prompt_tokens = case.context_tokens - case.output_tokens
    for i in range(case.running):
        prompt = [(7 * i + j) % (vocab - 8) + 5 for j in range(prompt_tokens)]
        params = SamplingParams(max_tokens=case.output_tokens, ignore_eos=True)
        engine.add_request(str(i), prompt, params, lambda _output: None)
    peak = 0
    while engine.has_work():
        with LiveTensorBytes() as live:
            engine.step()
        peak = max(peak, live.peak_bytes)
    cache = engine.cache
    tensors = [cache.k, cache.v] + ([cache.hidden] if cache.hidden is not None else [])
    slots = cache.k.shape[1]
    return Measured(
        case,
        plan_for(shape, case),
        sum(p.numel() * p.element_size() for p in model.parameters()),
        sum(t.numel() * t.element_size() for t in tensors) // slots,
        peak,
    )


def main() -> None:
    torch.set_num_threads(1)
    shape = load_model_config(default_model_dir() / "config.json")
    models = {d: load_mixtral_dir(default_model_dir(), dtype=t)[0] for d, t in TORCH_DTYPES.items()}
    table = Table(title="memory planner vs reference engine (shipped model, one device)")
    columns = ("deployment", "weights plan / model", "KV B/token plan / engine",
               "largest step", "activations plan", "measured peak", "measured / plan")  # fmt: skip
    for column in columns:
        table.add_column(column, justify="left" if column == "deployment" else "right")
    for case in CASES:
        m = measure(models[case.dtype], shape, case)
        table.add_row(
            case.label,
            f"{m.plan.weights.device_bytes:,} / {m.weight_bytes:,}",
            f"{m.plan.cache.bytes_per_token:,} / {m.kv_bytes_per_token:,}",
            m.plan.activations.step,
            f"{m.plan.activations.bytes:,}",
            f"{m.activation_peak_bytes:,}",
            f"{m.activation_ratio:.3f}",
        )
    Console(width=200).print(table)
    print(f"tolerance: measured / plan within 1 +- {ACTIVATION_TOLERANCE}")


if __name__ == "__main__":
    main()
