"""Measuring the adaptive policy's cost model on one calibration micro-batch.

Per operator kind: bytes of saved activations per token (from the budget's saved-tensor
accounting around each operator call) and forward seconds per token (what recomputing it
costs); the bytes saved outside operators (router, norms, logits); and host-copy speed for
offloading (a real copy out and back, timed).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from moeperf.targets.model.model import MoETransformer
from moeperf.targets.model.op_runner import DIRECT, Op
from moeperf.targets.training.policies import CostModel, MemoryBudget, OpCost

_OFFLOAD_PROBE_BYTES = 32 * 2**20


class _Probe:
    """Runs operators as keep-all would, measuring each one."""

    def __init__(self, budget: MemoryBudget):
        self.budget = budget
        self.bytes: dict[str, float] = defaultdict(float)
        self.seconds: dict[str, float] = defaultdict(float)
        self.tokens: dict[str, int] = defaultdict(int)

    def after_routing(self, layer: int, tokens_per_expert: Tensor) -> None:
        pass

    def run(self, op: Op, fn: Callable[..., Any], *args: Any) -> Any:
        if op[0] == "layer":
            return fn(*args)
        sync = torch.cuda.synchronize if args[0].is_cuda else (lambda: None)
        before = self.budget.saved_bytes()
        sync()
        started = time.perf_counter()
        out = fn(*args)
        sync()  # kernels run asynchronously on a GPU: time them, not their launch
        self.seconds[op[0]] += time.perf_counter() - started
        self.bytes[op[0]] += self.budget.saved_bytes() - before
        self.tokens[op[0]] += args[0].shape[0]
        return out


def calibrate_costs(
    model: MoETransformer,
    budget: MemoryBudget,
    idx: Tensor,
    targets: Tensor,
    loss_fn: Callable[[Any], Tensor],
) -> CostModel:
    """One forward under a probe (saved tensors tracked by ``budget``); no backward."""
    probe = _Probe(budget)
    model.set_runner(probe)
    try:
        start = budget.saved_bytes()
        loss = loss_fn(model(idx, targets))
        total = budget.saved_bytes() - start
    finally:
        model.set_runner(DIRECT)
    del loss

    def per_token(kind: str) -> OpCost:
        tokens = max(probe.tokens[kind], 1)
        return OpCost(probe.bytes[kind] / tokens, probe.seconds[kind] / tokens)

    return CostModel(
        attention=per_token("attention"),
        expert=per_token("expert"),
        other_bytes=int(max(total - probe.bytes["attention"] - probe.bytes["expert"], 0)),
        offload_seconds_per_byte=host_copy_seconds_per_byte(idx.device),
    )


def host_copy_seconds_per_byte(device: torch.device) -> float:
    """Out to host memory and back, as offloading a saved tensor does (best of three)."""
    source = torch.empty(_OFFLOAD_PROBE_BYTES // 4, dtype=torch.float32, device=device)
    pin = device.type == "cuda"
    host = torch.empty(source.shape, dtype=source.dtype, pin_memory=pin)
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        host.copy_(source, non_blocking=pin)
        source.copy_(host, non_blocking=pin)
        if pin:
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - started)
    return best / source.nbytes
