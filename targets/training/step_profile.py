"""Where one training step's time goes: ``torch.profiler`` over one step, its ops or
kernels sorted into the parts an MoE step is made of.

Parts, by the op's or kernel's name (``part_of``; first match wins, in this order):

- ``optimizer``: AdamW's fused and for-each kernels and ops (``Optimizer.step`` and
  ``_foreach_*``, ``multi_tensor_apply``, ``adam``);
- ``attention``: scaled-dot-product / flash / memory-efficient attention, softmax;
- ``gemm``: matrix products (``aten::mm``, ``addmm``, ``bmm``, cuBLAS/CUTLASS kernels);
- ``moe_dispatch``: routing and token movement (top-k, sort, index, gather, scatter,
  bincount, cumsum, nonzero, masked selects);
- ``other``: everything else (elementwise, norms, copies, the loss).

Time is self time: an op's own, not its children's, so the parts add up without counting
a GEMM under ``aten::linear`` twice. On CUDA the parts are the kernels' device time and
``idle`` is the step's wall time the device ran no kernel (one stream: kernels do not
overlap); on CPU the parts are the ops' CPU time on every thread, and ``idle`` the wall
time beyond their sum (zero when threads overlap).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from moeperf.targets.training.trainer import StepResult

Part = Literal["optimizer", "attention", "gemm", "moe_dispatch", "other"]
PARTS: tuple[Part, ...] = ("gemm", "attention", "moe_dispatch", "optimizer", "other")

_GEMM = r"\b(aten::)?(mm|addmm|bmm|baddbmm|_grouped_mm)\b|gemm|cublas|cutlass|xmma|sm\d+_"
_DISPATCH = r"topk|sort|index|gather|scatter|bincount|histc|cumsum|nonzero|masked_select|one_hot"
_PATTERNS: tuple[tuple[Part, re.Pattern[str]], ...] = (
    ("optimizer", re.compile(r"optimizer|_foreach_|multi_tensor_apply|adam", re.I)),
    ("attention", re.compile(r"attention|flash|fmha|softmax", re.I)),
    ("gemm", re.compile(_GEMM, re.I)),
    ("moe_dispatch", re.compile(_DISPATCH, re.I)),
)


def part_of(name: str) -> Part:
    """The part an op or kernel called ``name`` belongs to (module docstring)."""
    for part, pattern in _PATTERNS:
        if pattern.search(name):
            return part
    return "other"


@dataclass(frozen=True)
class TopItem:
    name: str
    part: Part
    self_s: float
    calls: int


@dataclass(frozen=True)
class StepProfile:
    """One profiled step: seconds per part, idle, and the five costliest ops or kernels."""

    device: str  # "cuda" (kernel time) or "cpu" (op time)
    wall_s: float
    parts_s: dict[Part, float]
    idle_s: float
    top: tuple[TopItem, ...]

    def share(self, part: Part | Literal["idle"]) -> float:
        value = self.idle_s if part == "idle" else self.parts_s[part]
        return value / self.wall_s if self.wall_s > 0 else 0.0


def profile_next_step(steps: Iterator[StepResult], device: str) -> tuple[StepResult, StepProfile]:
    """Run the next of a trainer's ``steps()`` under the profiler (earlier steps should
    have paid for warm-up: CUDA's lazy setup, the allocator's first growth)."""
    cuda = device == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        if cuda:
            torch.cuda.synchronize()
        started = time.perf_counter()
        result = next(steps)
        if cuda:
            torch.cuda.synchronize()
        wall_s = time.perf_counter() - started
    return result, summarize(prof.key_averages(), wall_s, device)


def summarize(averages: Iterable[Any], wall_s: float, device: str) -> StepProfile:
    """Parts and top items from ``torch.profiler``'s ``key_averages()``."""
    cuda = device == "cuda"
    parts: dict[Part, float] = dict.fromkeys(PARTS, 0.0)
    items: list[TopItem] = []
    for event in averages:
        if cuda:  # the kernels alone (the CPU ops that launched them are not device time)
            if event.device_type != DeviceType.CUDA:
                continue
            self_us = float(event.self_device_time_total)
            if self_us <= 0:
                continue
        else:
            self_us = float(event.self_cpu_time_total)
            if self_us <= 0 or event.key.startswith("ProfilerStep"):
                continue
        part = part_of(event.key)
        parts[part] += self_us / 1e6
        items.append(TopItem(event.key, part, self_us / 1e6, int(event.count)))
    busy = sum(parts.values())
    top = tuple(sorted(items, key=lambda i: i.self_s, reverse=True)[:5])
    return StepProfile(device, wall_s, parts, max(0.0, wall_s - busy), top)
