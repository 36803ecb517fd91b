"""Peak FLOP/s (targets.training.peak): measured on CPU, from the datasheet table on GPUs."""

import pytest
import torch

from moeperf.targets.training.peak import (
    CPU_MATMUL_SIZE,
    CpuMatmulDetail,
    DatasheetEntry,
    PeakFlopsError,
    datasheet_peak,
    given_peak,
    measure_cpu_peak,
    mfu,
    peak_flops,
)

# Sanity bounds only: a CPU core does more than 0.1 GFLOP/s, and no CPU 100 TFLOP/s.
CPU_FLOPS_PER_S_BOUNDS = (1e8, 1e14)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cpu_peak_is_measured_and_plausible(dtype):
    first = measure_cpu_peak(dtype, size=256, measure_s=0.05)
    second = measure_cpu_peak(dtype, size=256, measure_s=0.05)
    low, high = CPU_FLOPS_PER_S_BOUNDS
    assert low < first.flops_per_s < high
    assert 0.1 < second.flops_per_s / first.flops_per_s < 10  # same order of magnitude
    assert first.source == "measured"
    assert isinstance(first.detail, CpuMatmulDetail)
    assert first.detail.size == 256
    assert first.detail.dtype == str(dtype).removeprefix("torch.")
    assert first.detail.threads == torch.get_num_threads()
    assert first.detail.reps >= 3
    assert first.detail.best_s <= first.detail.median_s
    assert first.flops_per_s == 2 * 256**3 / first.detail.best_s


def test_peak_flops_measures_on_cpu():
    peak = peak_flops("cpu", torch.float32, measure_s=0.05)
    assert peak.source == "measured"
    assert isinstance(peak.detail, CpuMatmulDetail)
    assert peak.detail.size == CPU_MATMUL_SIZE
    assert CPU_FLOPS_PER_S_BOUNDS[0] < peak.flops_per_s < CPU_FLOPS_PER_S_BOUNDS[1]


@pytest.mark.parametrize("name", ["NVIDIA H200", "NVIDIA H100 80GB HBM3"])
def test_hopper_sxm_bf16_is_989_dense_tflops(name):
    peak = datasheet_peak(name, torch.bfloat16)
    assert peak.flops_per_s == pytest.approx(989e12, rel=1e-3)
    assert peak.source.startswith("datasheet: NVIDIA H")
    assert isinstance(peak.detail, DatasheetEntry)


@pytest.mark.parametrize(
    ("name", "dtype", "tf32", "tflops"),
    [
        ("NVIDIA H100 80GB HBM3", torch.float32, False, 67),
        ("NVIDIA H100 80GB HBM3", torch.float32, True, 494.7),
        ("NVIDIA H200", torch.float16, False, 989.4),
        ("NVIDIA A100-SXM4-80GB", torch.bfloat16, False, 312),
        ("NVIDIA A100-SXM4-40GB", torch.float32, False, 19.5),
        ("NVIDIA A100-SXM4-40GB", torch.float32, True, 156),
    ],
)
def test_datasheet_columns(name, dtype, tf32, tflops):
    assert datasheet_peak(name, dtype, tf32).flops_per_s == pytest.approx(tflops * 1e12)


@pytest.mark.parametrize(
    "name",
    ["NVIDIA GeForce RTX 4090", "NVIDIA H100 PCIe", "NVIDIA H200 NVL", "NVIDIA GH200 480GB"],
)
def test_gpus_not_in_the_table_ask_for_peak_flops(name):
    with pytest.raises(PeakFlopsError, match="pass --peak-flops explicitly") as error:
        datasheet_peak(name, torch.bfloat16)
    assert name in str(error.value)


def test_unknown_dtype_or_device_asks_for_peak_flops():
    with pytest.raises(PeakFlopsError, match=r"float64.*--peak-flops"):
        datasheet_peak("NVIDIA H200", torch.float64)
    with pytest.raises(PeakFlopsError, match=r"meta.*--peak-flops"):
        peak_flops("meta", torch.bfloat16)


def test_given_peak_and_mfu():
    peak = given_peak(1e12)
    assert peak.source == "given: --peak-flops"
    assert mfu(model_flops=2e11, step_time_s=0.5, peak=peak) == pytest.approx(0.4)
    with pytest.raises(PeakFlopsError, match="must be > 0"):
        given_peak(0)
    with pytest.raises(ValueError, match="step_time_s must be > 0"):
        mfu(1.0, 0.0, peak)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_this_gpu_is_in_the_table_and_a_bf16_matmul_stays_below_it():
    peak = peak_flops("cuda", torch.bfloat16)
    assert peak.source.startswith("datasheet: ")
    n, reps = 8192, 10
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        a @ b
    end.record()
    torch.cuda.synchronize()
    achieved_flops_per_s = reps * 2 * n**3 / (start.elapsed_time(end) / 1e3)
    assert 0.1 * peak.flops_per_s < achieved_flops_per_s < peak.flops_per_s
