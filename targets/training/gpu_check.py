"""The trainer on a GPU with the real CUDA allocator: MFU per activation policy against the
device's datasheet peak, and a real ``torch.cuda.OutOfMemoryError`` recovered from.

    python -m moeperf.targets.training.gpu_check [--steps N] [--out FILE.json]

Prints one line per scenario and writes them as JSON. Needs a CUDA device.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
from dataclasses import replace
from typing import Any

import torch

from moeperf.targets.model.config import MoEConfig
from moeperf.targets.training.peak import PeakFlops, peak_flops
from moeperf.targets.training.setup import TrainerConfig, build
from moeperf.targets.training.trainer import StepResult, Trainer

# Big enough to keep an H200 busy, small enough to build in seconds: ~0.4B parameters,
# 16 experts (top-2) of 1024 x 1024 SwiGLU per layer, the shipped tokenizer's vocabulary.
GPU_MODEL = MoEConfig(
    vocab_size=4096, hidden_size=1024, expert_hidden_size=1024, num_layers=8, num_heads=16,
    num_kv_heads=4, num_experts=16, top_k=2, max_position=2048, mtp_depth=1,
)  # fmt: skip


def _scenario(base: TrainerConfig, peak: float, **changes: Any) -> dict[str, Any]:
    gc.collect()  # the previous scenario's model and optimizer
    torch.cuda.empty_cache()
    cfg = replace(base, **changes)
    results: list[StepResult] = []
    Trainer(build(cfg)).run(results.append)
    timed = results[2:] or results  # the first steps pay for CUDA's lazy setup
    step_s = [(r.end_ns - r.start_ns) / 1e9 for r in timed]
    events = [e["kind"] for r in results for e in r.events]
    median_s = sorted(step_s)[len(step_s) // 2]
    return {
        "policy": cfg.policy,
        "skew": cfg.skew,
        "budget_bytes": cfg.budget_bytes,
        "steps": len(results),
        "tokens_per_step": results[-1].tokens,
        "median_step_s": median_s,
        "tokens_per_s": results[-1].tokens / median_s,
        "mfu": results[-1].model_flops / (median_s * peak),
        "peak_memory_bytes": max(r.peak_memory_bytes for r in results),
        "ooms": events.count("oom"),
        "restarts": events.count("restart"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m moeperf.targets.training.gpu_check")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--out", default=None)
    parser.add_argument("--tokens", default=None, help="a saved token stream (torch.save)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    peak = peak_flops("cuda", torch.bfloat16)
    print(f"{torch.cuda.get_device_name()}: peak {peak.flops_per_s / 1e12:.1f} TFLOP/s "
          f"({peak.source})", flush=True)  # fmt: skip
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        base = TrainerConfig(
            model=GPU_MODEL, init_from=None, mtp=True, seq_len=1024, micro_batch_size=8,
            microbatches=4, steps=args.steps, dtype="bfloat16", device="cuda", threads=4,
            skew="calm", pipeline_stages=4, stage=0, expert_parallel=1,
            checkpoint_every=1000, checkpoint_dir=tmp, token_stream_path=args.tokens,
        )  # fmt: skip
        for policy in ("keep-all", "full-recompute", "selective", "adaptive"):
            rows.append(_scenario(base, peak.flops_per_s, policy=policy))
            print(json.dumps(rows[-1]), flush=True)
            _save(args.out, peak, rows)
        # A real CUDA OOM: keep-all under a budget below its own peak, recovered from.
        tight = int(rows[0]["peak_memory_bytes"] * 0.8)
        rows.append(_scenario(base, peak.flops_per_s, policy="keep-all", budget_bytes=tight,
                              steps=4, checkpoint_every=1))  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
        rows.append(_scenario(base, peak.flops_per_s, policy="adaptive", budget_bytes=tight,
                              steps=4))  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    _save(args.out, peak, rows)
    return 0


def _save(out: str | None, peak: PeakFlops, rows: list[dict[str, Any]]) -> None:
    if out:
        with open(out, "w") as f:
            json.dump({"peak": peak.flops_per_s, "peak_source": peak.source, "rows": rows}, f)


if __name__ == "__main__":
    sys.exit(main())
