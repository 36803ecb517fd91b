"""Where a step's time goes: the parts ops and kernels are sorted into (step_profile.py),
on names as torch.profiler reports them on a CPU and as CUDA kernels are named."""

from __future__ import annotations

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from moeperf.targets.training.step_profile import part_of, summarize


@pytest.mark.parametrize(
    ("name", "part"),
    [
        ("aten::mm", "gemm"),
        ("aten::addmm", "gemm"),
        ("aten::bmm", "gemm"),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "gemm"),
        ("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_tn", "gemm"),
        ("cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm>", "gemm"),
        ("aten::_scaled_dot_product_flash_attention_for_cpu", "attention"),
        ("flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64, 64, 4>>", "attention"),
        ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80", "attention"),
        ("aten::_softmax", "attention"),
        ("aten::topk", "moe_dispatch"),
        ("aten::index_add_", "moe_dispatch"),
        ("aten::argsort", "moe_dispatch"),
        ("aten::bincount", "moe_dispatch"),
        ("void at::native::(anonymous namespace)::indexSelectLargeIndex<float>", "moe_dispatch"),
        ("Optimizer.step#AdamW.step", "optimizer"),
        ("aten::_foreach_mul_", "optimizer"),
        ("void at::native::multi_tensor_apply_kernel<FusedAdamMathFunctor>", "optimizer"),
        ("aten::mul", "other"),
        ("aten::silu", "other"),
        ("aten::copy_", "other"),
        ("vectorized_elementwise_kernel<4, CUDAFunctor_add<float>>", "other"),
    ],
)
def test_each_name_goes_to_its_part(name, part):
    assert part_of(name) == part


def test_a_cpu_profile_sums_each_parts_own_time():
    torch.manual_seed(0)
    a, b = torch.randn(256, 256), torch.randn(256, 256)
    q = torch.randn(1, 4, 64, 32)
    weights = torch.randn(4096, requires_grad=True)
    weights.grad = torch.ones_like(weights)
    optimizer = torch.optim.AdamW([weights], foreach=True)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(5):
            a @ b
        torch.nn.functional.scaled_dot_product_attention(q, q, q)
        torch.randn(4096, 8).topk(2, dim=-1)
        optimizer.step()
    averages = prof.key_averages()
    step = summarize(averages, wall_s=10.0, device="cpu")
    own = {e.key: e.self_cpu_time_total / 1e6 for e in averages}
    assert step.parts_s["gemm"] >= own["aten::mm"] > 0
    assert step.parts_s["attention"] > 0 and step.parts_s["moe_dispatch"] >= own["aten::topk"]
    assert step.parts_s["optimizer"] > 0
    # Self times: the parts add up to the profile's total, nothing counted twice.
    total = sum(t for k, t in own.items() if not k.startswith("ProfilerStep"))
    assert sum(step.parts_s.values()) == pytest.approx(total)
    assert step.idle_s == pytest.approx(10.0 - total)
    assert len(step.top) == 5 and step.top[0].self_s >= step.top[-1].self_s
    assert step.share("idle") == pytest.approx(step.idle_s / 10.0)
