"""The GPU checks' CPU side (benchmarks/gpu/): gpu_check's code path run on the CPU at the
tiny size, the refusal without a CUDA device, and the GPU spec files, valid but for the
device this host lacks. What only a GPU can show (MFU, real CUDA OOMs, NVML, NCCL) is
check.sh's to run on a lent machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from moeperf.specs import load_spec
from moeperf.targets.training import gpu_check

REPO = Path(__file__).resolve().parents[2]
NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA refusal")


@pytest.mark.slow  # two scenarios of the trainer, ~20 s
def test_gpu_check_runs_its_scenarios_and_profiles_a_step_on_the_cpu(tmp_path, capsys):
    out = tmp_path / "mfu.json"
    code = gpu_check.main(["--device", "cpu", "--size", "tiny", "--steps", "2",
                           "--policies", "keep-all,full-recompute", "--out", str(out)])  # fmt: skip
    assert code == 0
    result = json.loads(out.read_text())
    assert result["device"] == "cpu" and result["size"] == "tiny"
    assert [r["policy"] for r in result["rows"]] == ["keep-all", "full-recompute"]
    keep, recompute = result["rows"]
    for row in (keep, recompute):
        assert row["aborted"] is None and row["steps"] == 2 and row["ooms"] == 0
        assert 0 < row["mfu"] < 1 and row["tokens_per_s"] > 0
        profile = row["profile"]
        parts = profile["parts_s"]
        # The tiny model's step has every part: matmuls, attention, routing, AdamW.
        assert all(parts[p] > 0 for p in ("gemm", "attention", "moe_dispatch", "optimizer"))
        # One thread: its ops' own time fits in the step's wall time.
        assert 0 < sum(parts.values()) <= profile["wall_s"] * 1.05
        assert len(profile["top"]) == 5
    # Full recompute keeps less and runs the forward twice.
    assert recompute["peak_memory_bytes"] < keep["peak_memory_bytes"]
    printed = capsys.readouterr().out
    assert "keep-all calm budget=None: MFU" in printed and "idle" in printed


@NO_CUDA
def test_without_cuda_gpu_check_says_so_and_exits_2(capsys):
    assert gpu_check.main([]) == 2
    assert "no CUDA device" in capsys.readouterr().err


@NO_CUDA
def test_without_cuda_check_sh_stops_before_any_step(tmp_path):
    done = subprocess.run(
        ["bash", str(REPO / "benchmarks/gpu/check.sh"), str(tmp_path)],
        env={**os.environ, "MOEPERF_PYTHON": sys.executable},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "no CUDA device here" in done.stderr and "need one NVIDIA GPU" in done.stderr
    assert not (tmp_path / "steps.tsv").exists()


def test_the_gpu_specs_are_valid_apart_from_the_device():
    on_cpu = ["trainer.device='cpu'"]
    oom = load_spec(str(REPO / "benchmarks/gpu/training-oom-gpu.toml"), on_cpu).training
    assert oom is not None and oom.matrix.order == "sequential"
    assert oom.trainer.dtype == "bfloat16" and oom.trainer.model.model_dump()["hidden_size"] == 1024
    assert set(oom.matrix.skews) == {"calm", "spiky"}
    dist = load_spec(str(REPO / "benchmarks/gpu/training-dist-gpu.toml"), on_cpu)
    assert dist.training_dist is not None and dist.training_dist.faults is None
    assert [layout.name for layout in dist.training_dist.matrix.layouts] == ["single"]
