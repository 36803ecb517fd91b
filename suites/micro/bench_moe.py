"""MoE expert computation: grouped by expert against a loop per expert and a loop per token.

A stand-in written for this benchmark only: the reference MoE model will live in
``targets/model`` (a later issue), and its own expert dispatch should be benchmarked there.
This file compares dispatch strategies for one SwiGLU MoE layer on identical inputs and
routing (top-k computed once, outside the timed code):

- ``grouped``: the (token, slot) pairs sorted by expert, the tokens gathered once
  (``index_select``) and ``split`` into one contiguous group per expert, one matmul per
  weight per group, results scattered back with ``index_add_``.
- ``per_expert``: a loop over experts, each finding its tokens with a mask (``where``)
  and gathering them (the common Hugging Face style); also one matmul per weight per expert.
- ``per_token``: a Python loop over tokens and their top-k experts, vector-matrix products.

All three do the same FLOPs; they differ in how many, and how large, the matmuls are.
Needs ``torch`` (``pip install torch==2.13.0``; the CPU build from PyTorch's CPU index,
docs/getting-started/install.md); skipped without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # annotations only: torch itself is imported or the module skipped
    from torch import Tensor

torch = pytest.importorskip("torch")
F = torch.nn.functional

# One decode-sized batch through one layer, small enough for a 2-core CPU.
TOKENS = 256
D_MODEL = 256
D_FF = 512
EXPERTS = 8
TOP_K = 2
THREADS = 1
# 3 matmuls (gate, up, down) of 2 * D_MODEL * D_FF FLOPs per (token, expert) pair.
FLOPS = 2 * 3 * D_MODEL * D_FF * TOKENS * TOP_K


@dataclass(frozen=True)
class Layer:
    x: Tensor  # [TOKENS, D_MODEL]
    experts: Tensor  # [TOKENS, TOP_K] expert index of each slot
    weights: Tensor  # [TOKENS, TOP_K] routing weight of each slot, rows sum to 1
    w_gate: Tensor  # [EXPERTS, D_MODEL, D_FF]
    w_up: Tensor  # [EXPERTS, D_MODEL, D_FF]
    w_down: Tensor  # [EXPERTS, D_FF, D_MODEL]


def make_layer(seed: int = 0) -> Layer:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(TOKENS, D_MODEL, generator=g)
    router = torch.randn(D_MODEL, EXPERTS, generator=g) / D_MODEL**0.5
    probs = (x @ router).softmax(dim=-1)  # [TOKENS, EXPERTS]
    weights, experts = probs.topk(TOP_K, dim=-1)  # [TOKENS, TOP_K] each
    weights = weights / weights.sum(dim=-1, keepdim=True)
    return Layer(
        x=x,
        experts=experts,
        weights=weights,
        w_gate=torch.randn(EXPERTS, D_MODEL, D_FF, generator=g) / D_MODEL**0.5,
        w_up=torch.randn(EXPERTS, D_MODEL, D_FF, generator=g) / D_MODEL**0.5,
        w_down=torch.randn(EXPERTS, D_FF, D_MODEL, generator=g) / D_FF**0.5,
    )


def swiglu(layer: Layer, e: int, x: Tensor) -> Tensor:
    """Expert ``e`` on rows ``x`` [n, D_MODEL] -> [n, D_MODEL]."""
    return (F.silu(x @ layer.w_gate[e]) * (x @ layer.w_up[e])) @ layer.w_down[e]


@torch.inference_mode()
def grouped(layer: Layer) -> Tensor:
    flat = layer.experts.reshape(-1)  # [TOKENS * TOP_K]
    order = torch.argsort(flat, stable=True)  # slots sorted by expert
    token = order // TOP_K  # [TOKENS * TOP_K] token of each sorted slot
    counts = torch.bincount(flat, minlength=EXPERTS).tolist()
    rows = layer.x.index_select(0, token)  # [TOKENS * TOP_K, D_MODEL], grouped by expert
    outputs = [swiglu(layer, e, group) for e, group in enumerate(rows.split(counts)) if len(group)]
    y = torch.cat(outputs) * layer.weights.reshape(-1)[order].unsqueeze(1)
    return torch.zeros_like(layer.x).index_add_(0, token, y)


@torch.inference_mode()
def per_expert(layer: Layer) -> Tensor:
    out = torch.zeros_like(layer.x)
    for e in range(EXPERTS):
        token, slot = torch.where(layer.experts == e)  # [n_e] each
        if len(token):
            y = swiglu(layer, e, layer.x[token]) * layer.weights[token, slot].unsqueeze(1)
            out.index_add_(0, token, y)
    return out


@torch.inference_mode()
def per_token(layer: Layer) -> Tensor:
    out = torch.zeros_like(layer.x)
    experts = layer.experts.tolist()
    for t in range(TOKENS):
        x = layer.x[t : t + 1]  # [1, D_MODEL]
        for k in range(TOP_K):
            out[t] += layer.weights[t, k] * swiglu(layer, experts[t][k], x)[0]
    return out


VARIANTS = {"grouped": grouped, "per_expert": per_expert, "per_token": per_token}


@pytest.fixture(scope="module")
def layer() -> Layer:
    return make_layer()


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """One intra-op thread: on a shared 2-core machine a second OpenMP thread that gets
    preempted stalls every matmul at its barrier, which made rounds vary several-fold."""
    threads = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    yield
    torch.set_num_threads(threads)


def test_variants_agree(layer: Layer) -> None:
    reference = per_token(layer)
    for name, variant in VARIANTS.items():
        torch.testing.assert_close(variant(layer), reference, atol=1e-4, rtol=1e-4, msg=name)


@pytest.mark.benchmark(group="moe")
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_moe_experts(benchmark, layer: Layer, variant: str) -> None:
    benchmark.extra_info.update(
        tokens=TOKENS,
        d_model=D_MODEL,
        d_ff=D_FF,
        experts=EXPERTS,
        top_k=TOP_K,
        flops=FLOPS,
        torch=torch.__version__,
        threads=torch.get_num_threads(),
    )
    out = benchmark(VARIANTS[variant], layer)
    assert out.shape == (TOKENS, D_MODEL)
