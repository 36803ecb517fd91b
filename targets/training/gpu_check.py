"""The trainer on a GPU with the real CUDA allocator: MFU per activation policy against the
device's datasheet peak, and where one step's time goes (``step_profile``). The OOM
scenarios are training-oom's, run on the GPU by benchmarks/gpu/check.sh.

    python -m moeperf.targets.training.gpu_check [--size gpu-large] [--steps N] [--out FILE.json]

Prints one line per scenario and writes them as JSON (after each scenario, so a run cut
short keeps what it measured). Needs a CUDA device; ``--device cpu --size tiny`` runs the
same code on the CPU in seconds (the tests do). benchmarks/gpu/check.sh runs it with the
rest of the GPU checks.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import torch

from moeperf.targets.model.config import MoEConfig
from moeperf.targets.training.peak import peak_flops
from moeperf.targets.training.setup import TrainerConfig, build
from moeperf.targets.training.step_profile import profile_next_step
from moeperf.targets.training.trainer import StepResult, Trainer, TrainingAbortedError

# "gpu": ~0.4B parameters, 16 experts (top-2) of 1024 x 1024 SwiGLU per layer, the shipped
# tokenizer's vocabulary; big enough to keep an H200 busy, small enough to build in
# seconds (0.98% MFU on an H200, 2026-11-30). "gpu-large": the same architecture with
# 2048-wide blocks and 4096-wide experts (~1.9B parameters with its MTP layer, ~0.55B
# active), whose GEMMs are large enough for the tensor cores to matter; the MFU target
# (30% of the bf16 peak) is for it. "tiny": the CPU smoke size.
SIZES: dict[str, tuple[MoEConfig, int, int]] = {  # model, seq_len, micro_batch_size
    "gpu": (MoEConfig(
        vocab_size=4096, hidden_size=1024, expert_hidden_size=1024, num_layers=8,
        num_heads=16, num_kv_heads=4, num_experts=16, top_k=2, max_position=2048,
        mtp_depth=1), 1024, 8),
    "gpu-large": (MoEConfig(
        vocab_size=4096, hidden_size=2048, expert_hidden_size=4096, num_layers=8,
        num_heads=16, num_kv_heads=4, num_experts=8, top_k=2, max_position=2048,
        mtp_depth=1), 1024, 8),
    "tiny": (MoEConfig(
        vocab_size=4096, hidden_size=64, expert_hidden_size=128, num_layers=2, num_heads=4,
        num_kv_heads=2, num_experts=4, top_k=2, max_position=256, mtp_depth=1), 64, 2),
}  # fmt: skip
POLICIES = ("keep-all", "full-recompute", "selective", "adaptive")


def _scenario(base: TrainerConfig, peak: float, **changes: Any) -> dict[str, Any]:
    gc.collect()  # the previous scenario's model and optimizer
    if base.device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    cfg = replace(base, **changes)
    steps = Trainer(build(cfg)).steps()
    results: list[StepResult] = []
    try:
        results += _take(steps, cfg.steps - 1)
        profiled, step_profile = profile_next_step(steps, cfg.device)
    except TrainingAbortedError as exc:
        return {"policy": cfg.policy, "skew": cfg.skew, "budget_bytes": cfg.budget_bytes,
                "steps": len(results), "aborted": str(exc)}  # fmt: skip
    finally:
        steps.close()
    results.append(profiled)
    # The first steps pay for CUDA's lazy setup; the profiled one for the profiler.
    timed = results[2:-1] or results[:-1]
    step_s = sorted((r.end_ns - r.start_ns) / 1e9 for r in timed)
    events = [e["kind"] for r in results for e in r.events]
    median_s = step_s[len(step_s) // 2]
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
        "profile": dataclasses.asdict(step_profile),  # the last step's
        "aborted": None,
    }


def _take(steps: Iterator[StepResult], n: int) -> list[StepResult]:
    return [next(steps) for _ in range(n)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m moeperf.targets.training.gpu_check")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--size", choices=sorted(SIZES), default="gpu-large")
    parser.add_argument("--steps", type=int, default=6, help="per scenario (>= 2)")
    parser.add_argument("--policies", default=",".join(POLICIES),
                        help="comma-separated, of " + ", ".join(POLICIES))  # fmt: skip
    parser.add_argument("--out", default=None)
    parser.add_argument("--tokens", default=None, help="a saved token stream (torch.save)")
    args = parser.parse_args(argv)
    if args.steps < 2:
        parser.error(f"--steps {args.steps}: at least 2 (the last is profiled)")
    policies = [p for p in args.policies.split(",") if p]
    unknown = sorted(set(policies) - set(POLICIES))
    if unknown or not policies:
        parser.error(f"--policies {args.policies!r}: valid are {', '.join(POLICIES)}")
    if args.device == "cuda" and not torch.cuda.is_available():
        print(
            "gpu_check: no CUDA device (torch.cuda.is_available() is False); "
            "--device cpu --size tiny runs the same code on the CPU",
            file=sys.stderr,
        )
        return 2
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    peak = peak_flops(args.device, dtype)
    name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print(f"{name}: peak {peak.flops_per_s / 1e12:.1f} TFLOP/s ({peak.source})", flush=True)
    model, seq_len, micro_batch = SIZES[args.size]
    rows: list[dict[str, Any]] = []
    head = {"device": name, "size": args.size, "model": dataclasses.asdict(model),
            "peak_flops_per_s": peak.flops_per_s, "peak_source": peak.source,
            "torch": torch.__version__}  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        base = TrainerConfig(
            model=model, init_from=None, mtp=True, seq_len=seq_len,
            micro_batch_size=micro_batch, microbatches=4, steps=args.steps,
            dtype="bfloat16" if args.device == "cuda" else "float32", device=args.device,
            threads=4 if args.device == "cuda" else 1, skew="calm", pipeline_stages=4,
            stage=0, expert_parallel=1, checkpoint_every=1000, checkpoint_dir=tmp,
            token_stream_path=args.tokens,
        )  # fmt: skip
        for policy in policies:
            rows.append(_scenario(base, peak.flops_per_s, policy=policy))
            _say(rows[-1])
            _save(args.out, head, rows)
    return 0


def _say(row: dict[str, Any]) -> None:
    if row["aborted"]:
        print(f"{row['policy']} {row['skew']} budget={row['budget_bytes']}: aborted after "
              f"{row['steps']} steps: {row['aborted']}", flush=True)  # fmt: skip
        return
    parts = row["profile"]["parts_s"]
    wall = row["profile"]["wall_s"] or 1.0
    shares = ", ".join(f"{p} {v / wall:.0%}" for p, v in parts.items())
    print(f"{row['policy']} {row['skew']} budget={row['budget_bytes']}: MFU {row['mfu']:.2%}, "
          f"{row['tokens_per_s']:,.0f} tokens/s, peak {row['peak_memory_bytes'] / 2**30:.2f} GiB, "
          f"{row['ooms']} OOM; last step: {shares}, idle "
          f"{row['profile']['idle_s'] / wall:.0%}", flush=True)  # fmt: skip


def _save(out: str | None, head: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    if out:
        with open(out, "w") as f:
            json.dump({**head, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
