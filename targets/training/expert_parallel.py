"""One device of an expert-parallel group, emulated in one process.

Routing skew costs memory only where experts live on different devices: top-k routing
always sends N * k token-slots in all, but with expert parallelism (Megatron's
expert_model_parallel_size) the device holding a hot expert receives more of them, and
their activations are its memory. One process computes every expert, and this runner
decides which of them count against the budget: in each layer, those of the expert-
parallel rank that received the most tokens in that layer. The job dies when any device
runs out of memory, and this device, the hottest rank of every layer, bounds them all from
above (a real rank is hottest in only some layers).

Experts of the other ranks run outside the budget's accounting (their activations are
those ranks' memory); the activation policy sees, and decides for, this device's experts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from moeperf.targets.model.op_runner import Op


def _not_accounted(tensor: Tensor) -> Tensor:
    return tensor


class HottestExpertRank:
    def __init__(self, policy: Any, ep_size: int, num_experts: int):
        if ep_size < 1 or num_experts % ep_size:
            raise ValueError(
                f"expert_parallel must divide num_experts ({num_experts}); got {ep_size}"
            )
        self.policy = policy
        self.ep_size = ep_size
        self.experts_per_rank = num_experts // ep_size
        self.name = policy.name
        self._local: dict[int, range] = {}  # layer -> this device's experts in that layer

    def begin_microbatch(self) -> None:
        self._local = {}
        self.policy.begin_microbatch()

    def take_decisions(self) -> tuple[list[dict], float]:
        return self.policy.take_decisions()

    def local_tokens(self, tokens_per_expert: Tensor) -> Tensor:
        """Tokens per rank ``[ep_size]`` for one layer's ``tokens_per_expert [E]``."""
        return tokens_per_expert.view(self.ep_size, self.experts_per_rank).sum(dim=1)

    def after_routing(self, layer: int, tokens_per_expert: Tensor) -> None:
        rank = int(self.local_tokens(tokens_per_expert).argmax())
        local = range(rank * self.experts_per_rank, (rank + 1) * self.experts_per_rank)
        self._local[layer] = local
        mine = torch.zeros_like(tokens_per_expert)
        mine[local.start : local.stop] = tokens_per_expert[local.start : local.stop]
        self.policy.after_routing(layer, mine)

    def run(self, op: Op, fn: Callable[..., Any], *args: Any) -> Any:
        kind, layer, expert = op
        if kind == "expert" and expert not in self._local.get(layer, range(0)):
            # Another rank's expert: kept by that rank, counted by nobody here.
            with torch.autograd.graph.saved_tensors_hooks(_not_accounted, _not_accounted):
                return fn(*args)
        return self.policy.run(op, fn, *args)
