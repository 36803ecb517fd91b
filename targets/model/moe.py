"""The mixture of experts: a softmax router choosing top-k of E SwiGLU experts, the dispatch
of tokens to their experts and back, and the Switch Transformer load-balancing loss.

Apart from attention and the model stack because the hybrid model's shared-expert MoE
subclasses ``MoE``, and the trainer's expert-parallel and routing-skew code drive it alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from moeperf.targets.model.config import MoEConfig
from moeperf.targets.model.op_runner import DIRECT, OpRunner


class Expert(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x), Mixtral's names."""

    def __init__(self, cfg: MoEConfig):
        super().__init__()
        self.w1 = nn.Linear(cfg.hidden_size, cfg.expert_hidden_size, bias=False)
        self.w2 = nn.Linear(cfg.expert_hidden_size, cfg.hidden_size, bias=False)
        self.w3 = nn.Linear(cfg.hidden_size, cfg.expert_hidden_size, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


@dataclass
class Routing:
    """One MoE layer's routing of N tokens."""

    tokens_per_expert: Tensor  # [E] int64: token-slots routed to each expert (N * top_k in all)
    aux_loss: Tensor  # scalar: Switch Transformer load-balancing loss, E * sum(f_e * P_e)


@dataclass
class Dispatch:
    """How one MoE layer's N tokens go to its experts: the router's top-k, and the N*k
    (token, expert) pairs sorted by expert (expert 0's first)."""

    probs: Tensor  # [N, E] float32: the router's softmax
    weights: Tensor  # [N, k] in x's dtype: each token's top-k probabilities, summing to 1
    order: Tensor  # [N*k]: the pairs (token-major, as weights.flatten()) in expert order
    token_of_pair: Tensor  # [N*k]: the token of each pair, in expert order
    tokens_per_expert: Tensor  # [E] int64: pairs routed to each expert


class MoE(nn.Module):
    """Top-k of E experts per token. ``expert`` builds one expert: Mixtral's by default; the
    hybrid model passes Qwen's SwiGLU, whose weights have other names."""

    def __init__(self, cfg: Any, layer: int, expert: Callable[[], nn.Module] | None = None):
        super().__init__()
        self.layer = layer
        self.top_k = cfg.top_k
        self.gate = nn.Linear(cfg.hidden_size, cfg.num_experts, bias=False)
        make = expert or (lambda: Expert(cfg))
        self.experts = nn.ModuleList(make() for _ in range(cfg.num_experts))
        # Added to the router logits when set: how a benchmark forces routing skew, as
        # Megatron's moe_router_force_biased does. A tensor [E], or a function of this
        # micro-batch's logits returning one. Not a weight; never saved.
        self.router_bias: Tensor | Callable[[int, Tensor], Tensor] | None = None
        self.runner: OpRunner = DIRECT

    def forward(self, x: Tensor) -> tuple[Tensor, Routing]:
        d = self.route(x)
        self.runner.after_routing(self.layer, d.tokens_per_expert)
        x_grouped = x[d.token_of_pair]  # [N*k, C], expert 0's tokens first
        out_grouped = torch.empty_like(x_grouped)
        start = 0
        for e, count in enumerate(d.tokens_per_expert.tolist()):
            if count:
                group = x_grouped[start : start + count]
                out_grouped[start : start + count] = self.runner.run(
                    ("expert", self.layer, e), self.experts[e], group
                )
            start += count
        y = self.combine(x, out_grouped, d)  # [N, C]
        return y, Routing(d.tokens_per_expert, self.aux_loss(d))

    def route(self, x: Tensor) -> Dispatch:
        """The router's top-k of ``x [N, C]``, its N*k (token, expert) pairs grouped by expert."""
        logits = self.gate(x)  # [N, E]
        if callable(self.router_bias):
            logits = logits + self.router_bias(self.layer, logits.detach())
        elif self.router_bias is not None:
            logits = logits + self.router_bias
        probs = F.softmax(logits, dim=-1, dtype=torch.float)
        weights, chosen = probs.topk(self.top_k, dim=-1)  # [N, k]
        weights = (weights / weights.sum(dim=-1, keepdim=True)).to(x.dtype)

        # Group the N*k (token, expert) pairs by expert so each expert runs one matmul
        # over all its tokens.
        flat_expert = chosen.flatten()  # [N*k]
        order = flat_expert.argsort(stable=True)
        token_of_pair = order // self.top_k
        tokens_per_expert = torch.bincount(flat_expert, minlength=len(self.experts))
        return Dispatch(probs, weights, order, token_of_pair, tokens_per_expert)

    def combine(self, x: Tensor, out_grouped: Tensor, d: Dispatch) -> Tensor:
        """Each token's output ``[N, C]``: its k experts' outputs (``out_grouped [N*k, C]``,
        in the order of ``d.order``) weighted and summed."""
        out_grouped = out_grouped * d.weights.flatten()[d.order, None]
        return torch.zeros_like(x).index_add_(0, d.token_of_pair, out_grouped)

    def aux_loss(self, d: Dispatch) -> Tensor:
        """Switch Transformer's load-balancing loss: E * sum(f_e * P_e), f_e the fraction of
        the N*k token-slots routed to expert e, P_e its mean router probability."""
        n, num_experts = d.probs.shape[0], len(self.experts)
        fraction_routed = d.tokens_per_expert.float() / max(n * self.top_k, 1)
        return num_experts * (fraction_routed * d.probs.mean(dim=0)).sum()
