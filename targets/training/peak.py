"""Peak FLOP/s of the training device, the denominator of MFU.

CPU: measured in the same process, by a large square matmul in the training dtype on the
threads torch is configured with (a few warm-up reps, then the best of N timed). GPU: a table
of dense (no structured sparsity) datasheet peaks, each entry citing its source; a GPU not in
the table is an error asking for ``--peak-flops``, never a guess.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

CPU_MATMUL_SIZE = 2048  # n of the n x n x n matmul: ~17 GFLOP, large enough to be GEMM-bound
CPU_WARMUP_REPS = 2
CPU_MIN_REPS = 3
CPU_MAX_REPS = 50
CPU_MEASURE_S = 1.0  # time budget of the timed reps (at least CPU_MIN_REPS run)


class PeakFlopsError(ValueError):
    """No peak FLOP/s is known for this device and dtype."""


@dataclass(frozen=True)
class CpuMatmulDetail:
    """How a CPU peak was measured."""

    size: int
    dtype: str
    threads: int
    warmup_reps: int
    reps: int
    best_s: float
    median_s: float


@dataclass(frozen=True)
class DatasheetEntry:
    """Dense peak FLOP/s of one GPU model and precision, and where the number comes from."""

    device: str  # the model, as torch.cuda.get_device_name() spells part of it
    excludes: tuple[str, ...]  # other form factors of the same chip, with other peaks
    precision: str  # "bf16", "fp16", "tf32" or "fp32"
    flops_per_s: float
    citation: str

    def matches(self, device_name: str) -> bool:
        name = device_name.upper()
        return self.device.upper() in name and not any(x.upper() in name for x in self.excludes)


@dataclass(frozen=True)
class PeakFlops:
    flops_per_s: float
    source: str  # "measured", "datasheet: <citation>" or "given: --peak-flops"
    detail: CpuMatmulDetail | DatasheetEntry | None


_H100 = (
    "NVIDIA H100 Tensor Core GPU datasheet and architecture whitepaper, H100 SXM5: "
    "BF16/FP16 989.4, TF32 494.7 dense TFLOP/s (twice that with sparsity), FP32 67 TFLOP/s"
)
_H200 = (
    "NVIDIA H200 Tensor Core GPU datasheet, H200 SXM: the same tensor-core peaks as H100 SXM "
    "(BF16/FP16 1,979 and TF32 989 TFLOP/s with sparsity, half that dense), FP32 67 TFLOP/s"
)
_A100 = (
    "NVIDIA A100 Tensor Core GPU datasheet, A100 SXM: BF16/FP16 312, TF32 156 dense TFLOP/s "
    "(twice that with sparsity), FP32 19.5 TFLOP/s"
)
_SXM_ONLY = ("PCIE", "NVL")  # PCIe and NVL boards run lower clocks and power: other peaks
_H200_SXM_ONLY = (*_SXM_ONLY, "GH200")  # Grace Hopper superchips: their own datasheet

DATASHEET: tuple[DatasheetEntry, ...] = (
    DatasheetEntry("H100", _SXM_ONLY, "bf16", 989.4e12, _H100),
    DatasheetEntry("H100", _SXM_ONLY, "fp16", 989.4e12, _H100),
    DatasheetEntry("H100", _SXM_ONLY, "tf32", 494.7e12, _H100),
    DatasheetEntry("H100", _SXM_ONLY, "fp32", 67e12, _H100),
    DatasheetEntry("H200", _H200_SXM_ONLY, "bf16", 989.4e12, _H200),
    DatasheetEntry("H200", _H200_SXM_ONLY, "fp16", 989.4e12, _H200),
    DatasheetEntry("H200", _H200_SXM_ONLY, "tf32", 494.7e12, _H200),
    DatasheetEntry("H200", _H200_SXM_ONLY, "fp32", 67e12, _H200),
    DatasheetEntry("A100-SXM", (), "bf16", 312e12, _A100),
    DatasheetEntry("A100-SXM", (), "fp16", 312e12, _A100),
    DatasheetEntry("A100-SXM", (), "tf32", 156e12, _A100),
    DatasheetEntry("A100-SXM", (), "fp32", 19.5e12, _A100),
)


def precision_of(dtype: torch.dtype, tf32: bool) -> str:
    """The datasheet column a matmul in ``dtype`` runs at (float32 on TF32 cores if allowed)."""
    if dtype == torch.bfloat16:
        return "bf16"
    if dtype == torch.float16:
        return "fp16"
    if dtype == torch.float32:
        return "tf32" if tf32 else "fp32"
    raise PeakFlopsError(f"no peak FLOP/s for dtype {dtype}; pass --peak-flops explicitly")


def datasheet_peak(device_name: str, dtype: torch.dtype, tf32: bool = False) -> PeakFlops:
    """The dense datasheet peak of ``device_name`` (as torch.cuda.get_device_name spells it)."""
    precision = precision_of(dtype, tf32)
    for entry in DATASHEET:
        if entry.precision == precision and entry.matches(device_name):
            return PeakFlops(entry.flops_per_s, f"datasheet: {entry.citation}", entry)
    known = sorted({e.device for e in DATASHEET})
    raise PeakFlopsError(
        f"no datasheet peak FLOP/s for GPU {device_name!r} in {precision} (the table knows "
        f"{', '.join(known)}, SXM boards); pass --peak-flops explicitly"
    )


def measure_cpu_peak(
    dtype: torch.dtype,
    size: int = CPU_MATMUL_SIZE,
    measure_s: float = CPU_MEASURE_S,
    warmup_reps: int = CPU_WARMUP_REPS,
) -> PeakFlops:
    """Best-of-N FLOP/s of an ``size``-square matmul in ``dtype`` on torch's current threads.

    Timed reps run until ``measure_s`` has passed (at least CPU_MIN_REPS, at most
    CPU_MAX_REPS); the best rep is the peak, as the least disturbed by the rest of the machine.
    """
    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(size, size, generator=generator).to(dtype)
    b = torch.randn(size, size, generator=generator).to(dtype)
    out = torch.empty(size, size, dtype=dtype)
    times_s: list[float] = []
    with torch.inference_mode():
        for _ in range(warmup_reps):
            torch.matmul(a, b, out=out)
        deadline = time.perf_counter() + measure_s
        while len(times_s) < CPU_MIN_REPS or (
            len(times_s) < CPU_MAX_REPS and time.perf_counter() < deadline
        ):
            start = time.perf_counter()
            torch.matmul(a, b, out=out)
            times_s.append(time.perf_counter() - start)
    times_s.sort()
    detail = CpuMatmulDetail(
        size=size,
        dtype=str(dtype).removeprefix("torch."),
        threads=torch.get_num_threads(),
        warmup_reps=warmup_reps,
        reps=len(times_s),
        best_s=times_s[0],
        median_s=times_s[len(times_s) // 2],
    )
    return PeakFlops(2 * size**3 / times_s[0], "measured", detail)


def peak_flops(
    device: torch.device | str, dtype: torch.dtype, measure_s: float = CPU_MEASURE_S
) -> PeakFlops:
    """Measured on a CPU, the datasheet's on a CUDA GPU (TF32 columns if torch allows TF32)."""
    device = torch.device(device)
    if device.type == "cpu":
        return measure_cpu_peak(dtype, measure_s=measure_s)
    if device.type == "cuda":
        return datasheet_peak(torch.cuda.get_device_name(device), dtype, cuda_matmul_uses_tf32())
    raise PeakFlopsError(f"no peak FLOP/s for device {device}; pass --peak-flops explicitly")


def cuda_matmul_uses_tf32() -> bool:
    """Whether float32 matmuls on CUDA run on TF32 tensor cores.

    Read through the new per-backend API, which reflects the legacy settings too
    (``set_float32_matmul_precision("high")``, ``allow_tf32 = True``); the legacy getters
    raise once the two APIs have been mixed.
    """
    return torch.backends.cuda.matmul.fp32_precision == "tf32"


def given_peak(flops_per_s: float) -> PeakFlops:
    """A peak the user passed (``--peak-flops``)."""
    if flops_per_s <= 0:
        raise PeakFlopsError(f"--peak-flops must be > 0, got {flops_per_s}")
    return PeakFlops(flops_per_s, "given: --peak-flops", None)


def mfu(model_flops: float, step_time_s: float, peak: PeakFlops) -> float:
    """Model FLOPs utilization: model FLOPs / (step time x peak FLOP/s)."""
    if step_time_s <= 0:
        raise ValueError(f"step_time_s must be > 0, got {step_time_s}")
    return model_flops / (step_time_s * peak.flops_per_s)
