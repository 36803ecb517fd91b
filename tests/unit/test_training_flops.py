"""The Megatron-convention FLOP formula (targets.training.flops) against FlopCounterMode.

FlopCounterMode counts what the GEMM kernels execute (mm, bmm, the SDPA kernels it has
formulas for), forward and backward; it counts no elementwise op, as the formula does not. On
the tiny MoE the two agree exactly, up to differences that are inherent and asserted exactly:

- attention scores: the math SDPA kernel multiplies the full T x T (the causal mask is applied
  after the product), so it matches ``causal_factor=1.0``, and the default 1/2 is lower by
  exactly half of the attention-score FLOPs;
- CPU's fused kernel (``_scaled_dot_product_flash_attention_for_cpu``) has no FlopCounterMode
  formula, so there it counts no attention-score FLOPs at all;
- torch's SDPA formulas (those used for the GPU kernels) count the backward's recomputation of
  Q K^T: 7 T x T products per block where Megatron counts 6.

Routed experts: the model routes every token to exactly top_k distinct experts and runs each
expert once over its tokens, so real routing costs exactly top_k of N experts per token.
"""

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

from moeperf.targets.model.config import MoEConfig
from moeperf.targets.model.model import MoETransformer
from moeperf.targets.training.flops import (
    MEGATRON_CAUSAL_FACTOR,
    TrainingFlops,
    flops_breakdown,
    training_flops,
    training_flops_per_token,
)

SMALL = MoEConfig(
    vocab_size=256,
    hidden_size=64,
    expert_hidden_size=48,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    num_experts=4,
    top_k=2,
    max_position=64,
    mtp_depth=0,
)
BATCH, SEQ_LEN = 2, 32
TOKENS = BATCH * SEQ_LEN

aten = torch.ops.aten


def cpu_sdpa_forward(query, key, value, *args, out_shape=None, **kwargs) -> int:
    return sdpa_flop_count(query, key, value)


def cpu_sdpa_backward(grad_out, query, key, value, *args, out_shape=None, **kwargs) -> int:
    return sdpa_backward_flop_count(grad_out, query, key, value)


# torch's own SDPA formulas (those of the GPU kernels), attached to CPU's fused kernel.
CPU_SDPA_WITH_TORCH_FORMULAS = {
    aten._scaled_dot_product_flash_attention_for_cpu: cpu_sdpa_forward,
    aten._scaled_dot_product_flash_attention_for_cpu_backward: cpu_sdpa_backward,
}


def count_training_step(
    cfg: MoEConfig,
    kernel: Callable[[], AbstractContextManager[object]] = nullcontext,
    custom_mapping: dict | None = None,
    device: str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> FlopCounterMode:
    """FlopCounterMode over one forward + backward on random weights and tokens."""
    torch.manual_seed(0)
    model = MoETransformer(cfg).to(device, dtype)
    idx = torch.randint(0, cfg.vocab_size, (BATCH, SEQ_LEN), device=device)
    targets = torch.randint(0, cfg.vocab_size, (BATCH, SEQ_LEN), device=device)
    with kernel(), FlopCounterMode(display=False, custom_mapping=custom_mapping) as counter:
        out = model(idx, targets)
        loss = out.loss if out.mtp_loss is None else out.loss + 0.3 * out.mtp_loss
        loss.backward()
    return counter


def counted_training_flops(cfg: MoEConfig, **kwargs) -> int:
    return count_training_step(cfg, **kwargs).get_total_flops()


def torch_counts_gqa_sdpa() -> bool:
    """Whether this torch's SDPA FLOP formulas accept fewer K/V heads than Q heads (2.13
    does; 2.11's assert)."""
    try:
        sdpa_flop_count((1, 2, 1, 1), (1, 1, 1, 1), (1, 1, 1, 1))
    except AssertionError:
        return False
    return True


needs_gqa_formulas = pytest.mark.skipif(
    not torch_counts_gqa_sdpa(), reason="this torch's FlopCounterMode has no GQA SDPA formula"
)


def math_kernel() -> AbstractContextManager[object]:
    return sdpa_kernel([SDPBackend.MATH])


def total(cfg: MoEConfig, causal_factor: float = MEGATRON_CAUSAL_FACTOR) -> float:
    return training_flops(cfg, TOKENS, SEQ_LEN, causal_factor=causal_factor)


def scores(cfg: MoEConfig, causal_factor: float) -> float:
    per_token = flops_breakdown(cfg, SEQ_LEN, causal_factor=causal_factor)
    return TOKENS * per_token.attention_scores_per_token


@pytest.mark.parametrize("mtp_depth", [0, 1])
def test_math_kernel_counts_exactly_the_full_square_formula(mtp_depth):
    cfg = SMALL.replace(mtp_depth=mtp_depth)
    counted = counted_training_flops(cfg, kernel=math_kernel)
    assert counted == total(cfg, causal_factor=1.0)
    # The default causal discount is exactly half of the attention-score FLOPs.
    assert counted - total(cfg) == scores(cfg, 1.0) / 2
    assert total(cfg) / counted == pytest.approx(1, rel=0.05)


@pytest.mark.parametrize("mtp_depth", [0, 1])
def test_cpu_fused_kernel_goes_uncounted(mtp_depth):
    cfg = SMALL.replace(mtp_depth=mtp_depth)
    assert counted_training_flops(cfg) == total(cfg) - scores(cfg, MEGATRON_CAUSAL_FACTOR)


@needs_gqa_formulas
def test_torch_sdpa_formulas_add_the_backward_recompute():
    counted = counted_training_flops(SMALL, custom_mapping=CPU_SDPA_WITH_TORCH_FORMULAS)
    full = scores(SMALL, 1.0)  # 6 T x T products per block: QK^T and AV, 3 passes each
    assert counted == total(SMALL, causal_factor=1.0) + full / 6


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize(
    "dtype", [torch.float32, pytest.param(torch.bfloat16, marks=needs_gqa_formulas)]
)
@pytest.mark.parametrize("mtp_depth", [0, 1])
def test_gpu_counts_full_square_plus_the_fused_kernels_recompute(mtp_depth, dtype):
    """Which SDPA kernel runs depends on dtype and torch: with GQA, float32 fell back to the
    math kernel (bmm, counted as executed) and bfloat16 ran cuDNN's (torch's SDPA formulas,
    backward recompute included) on an H200 with torch 2.11."""
    cfg = SMALL.replace(mtp_depth=mtp_depth)
    counter = count_training_step(cfg, device="cuda", dtype=dtype)
    fused = any("attention" in str(op) for op in counter.get_flop_counts()["Global"])
    recompute = scores(cfg, 1.0) / 6 if fused else 0
    assert counter.get_total_flops() == total(cfg, causal_factor=1.0) + recompute


def test_only_mtp_module_zero_is_trained():
    assert counted_training_flops(SMALL.replace(mtp_depth=2), kernel=math_kernel) == total(
        SMALL.replace(mtp_depth=1), causal_factor=1.0
    )
    assert flops_breakdown(SMALL.replace(mtp_depth=2), SEQ_LEN).mtp_modules == 1


# -- the formula's shape -------------------------------------------------------------------


def breakdown(**changes) -> TrainingFlops:
    return flops_breakdown(MoEConfig(**changes), seq_len=256)


def test_doubling_top_k_doubles_only_the_experts():
    base, doubled = breakdown(top_k=2), breakdown(top_k=4)
    assert doubled.experts_per_token == 2 * base.experts_per_token
    assert doubled.total_per_token - base.total_per_token == base.experts_per_token


def test_num_experts_changes_only_the_router():
    base, more = breakdown(num_experts=8), breakdown(num_experts=16)
    assert more.router_per_token == 2 * base.router_per_token
    assert more.total_per_token - base.total_per_token == base.router_per_token


def test_attention_scores_grow_linearly_with_seq_len_and_the_rest_does_not():
    short = flops_breakdown(MoEConfig(), seq_len=256)
    long = flops_breakdown(MoEConfig(), seq_len=512)
    assert long.attention_scores_per_token == 2 * short.attention_scores_per_token
    assert (
        long.total_per_token - long.attention_scores_per_token
        == short.total_per_token - short.attention_scores_per_token
    )
    assert long.total_per_sequence == 512 * long.total_per_token


def test_causal_factor_scales_only_the_scores():
    full = flops_breakdown(MoEConfig(), 256, causal_factor=1.0)
    half = flops_breakdown(MoEConfig(), 256)
    assert half.attention_scores_per_token == full.attention_scores_per_token / 2
    assert full.total_per_token - half.total_per_token == half.attention_scores_per_token


def test_fewer_kv_heads_shrink_only_k_and_v():
    mha, gqa = breakdown(num_kv_heads=8), breakdown(num_kv_heads=2)
    c = 256  # hidden_size; q and o keep 2 * C * C MACs each, k and v go from C*C to C*C/4
    per_block_saved = 6 * 2 * (c * c - c * c // 4)
    assert mha.attention_projections_per_token - gqa.attention_projections_per_token == (
        gqa.blocks * per_block_saved
    )


def test_mtp_module_is_eh_proj_a_block_and_a_head():
    cfg = MoEConfig(mtp_depth=1)
    with_mtp = flops_breakdown(cfg, 256)
    without = flops_breakdown(cfg, 256, include_mtp=False)
    block = (without.total_per_token - without.logits_per_token) / cfg.num_layers
    c, v = cfg.hidden_size, cfg.vocab_size
    assert with_mtp.mtp_per_token == 6 * 2 * c * c + block + 6 * c * v
    assert with_mtp.total_per_token - without.total_per_token == with_mtp.mtp_per_token
    assert without.mtp_per_token == 0.0


def test_default_model_per_token_values():
    """The default model at 256 tokens, worked by hand from the module docstring."""
    b = flops_breakdown(MoEConfig(mtp_depth=1), seq_len=256)
    assert dict(b.components_per_token()) == {
        "attention_projections": 5 * 6 * 256 * 32 * (8 + 2 * 2 + 8),
        "attention_scores": 5 * 6 * 2 * 256 * 256 * 0.5,
        "router": 5 * 6 * 256 * 8,
        "experts": 5 * 6 * 2 * 3 * 256 * 128,
        "logits": 2 * 6 * 256 * 4096,
        "mtp_eh_proj": 6 * 2 * 256 * 256,
    }
    assert b.total_per_token == 26_210_304
    assert training_flops(MoEConfig(mtp_depth=1), 8 * 256, 256) == 8 * b.total_per_sequence
    assert training_flops_per_token(MoEConfig(mtp_depth=1), 256) == b.total_per_token


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"seq_len": 0}, "seq_len must be >= 1"),
        ({"seq_len": 8, "causal_factor": 0.0}, r"causal_factor must be in \(0, 1\]"),
        ({"seq_len": 8, "tokens": -1}, "tokens must be >= 0"),
    ],
)
def test_bad_arguments_name_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        training_flops(MoEConfig(), **{"tokens": 1, **kwargs})
