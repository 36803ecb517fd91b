"""Activation-memory policies: what each operator keeps for backward.

Each policy is an ``OpRunner`` (targets.model.op_runner): the model hands it every operator
("layer", "attention", "expert") to run.

- keep-all (aggressive): autograd keeps everything; fastest while it fits.
- full-recompute (conservative): every transformer layer under torch.utils.checkpoint, only
  its input kept; the layer's forward runs again in backward.
- selective: the expert SwiGLUs always recomputed (the activations that grow with routing
  skew), attention kept, as Megatron's selective recompute does for the costly part.
- adaptive (BaGuaLu-2, CONTEXT.md "Training"): once a layer's router has chosen and before
  its experts run, a cost model predicts this micro-batch's peak; only when it would cross
  the budget does it choose, per operator, to keep, recompute or offload to host memory the
  cheapest set that fits. Its decisions and the time spent deciding are recorded.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from torch import Tensor
from torch.utils.checkpoint import checkpoint

from moeperf.targets.model.op_runner import Op

Action = Literal["keep", "recompute", "offload"]
POLICY_NAMES = ("keep-all", "full-recompute", "selective", "adaptive")


class MemoryBudget(Protocol):
    """What a policy needs from the device-memory budget (targets.training.memory)."""

    limit_bytes: int

    def in_use_bytes(self) -> int: ...  # everything accounted now, working set included

    def saved_bytes(self) -> int: ...  # saved activations alive now

    # Saved tensors go to host memory inside the block (what it yields is not used here).
    def offload(self) -> AbstractContextManager[object]: ...


def _recompute(fn: Callable[..., Any], *args: Any) -> Any:
    return checkpoint(fn, *args, use_reentrant=False)


class KeepAll:
    name = "keep-all"

    def begin_microbatch(self) -> None:
        pass

    def after_routing(self, layer: int, tokens_per_expert: Tensor) -> None:
        pass

    def run(self, op: Op, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args)

    def take_decisions(self) -> tuple[list[dict], float]:
        return [], 0.0


class FullRecompute(KeepAll):
    name = "full-recompute"

    def run(self, op: Op, fn: Callable[..., Any], *args: Any) -> Any:
        return _recompute(fn, *args) if op[0] == "layer" else fn(*args)


class SelectiveRecompute(KeepAll):
    name = "selective"

    def run(self, op: Op, fn: Callable[..., Any], *args: Any) -> Any:
        return _recompute(fn, *args) if op[0] == "expert" else fn(*args)


@dataclass(frozen=True)
class OpCost:
    bytes_per_token: float  # saved activations
    seconds_per_token: float  # forward time, which is what recomputing it costs


@dataclass(frozen=True)
class CostModel:
    """Measured on one calibration micro-batch (``calibrate_costs``)."""

    attention: OpCost
    expert: OpCost
    other_bytes: int  # saved outside the operators per micro-batch (router, norms, logits)
    offload_seconds_per_byte: float  # copy to host and back


@dataclass
class _Choice:
    op: Op
    action: Action
    bytes: float
    cost_s: float


@dataclass
class AdaptivePolicy:
    budget: MemoryBudget
    cost: CostModel
    num_blocks: int  # main layers and MTP blocks: every layer whose operators we see
    tokens_per_microbatch: int
    top_k: int
    margin: float = 0.03  # of the budget, for what the cost model does not see
    name: str = "adaptive"
    # The blocks this device runs (a pipeline stage's, by slot); None: all num_blocks.
    blocks: tuple[int, ...] | None = None
    _plan: dict[Op, Action] = field(default_factory=dict)
    _decisions: list[dict] = field(default_factory=list)
    _decide_s: float = 0.0
    _start_saved: int = 0
    _op_bytes_so_far: float = 0.0

    def begin_microbatch(self) -> None:
        self._plan = {}
        self._start_saved = self.budget.saved_bytes()
        self._op_bytes_so_far = 0.0

    def take_decisions(self) -> tuple[list[dict], float]:
        """This micro-batch's decisions so far and the seconds spent deciding; resets."""
        out = self._decisions, self._decide_s
        self._decisions, self._decide_s = [], 0.0
        return out

    def run(self, op: Op, fn: Callable[..., Any], *args: Any) -> Any:
        if op[0] == "layer":
            return fn(*args)
        tokens = args[0].shape[0]
        per_token = self.cost.attention if op[0] == "attention" else self.cost.expert
        action = self._plan.get(op, "keep")
        if action == "keep":
            self._op_bytes_so_far += tokens * per_token.bytes_per_token
            return fn(*args)
        if action == "recompute":
            return _recompute(fn, *args)
        with self.budget.offload():
            return fn(*args)

    def after_routing(self, layer: int, tokens_per_expert: Tensor) -> None:
        started = time.perf_counter()
        loads = tokens_per_expert.tolist()
        predicted = self._predicted_peak(layer, loads)
        excess = predicted - self.budget.limit_bytes * (1.0 - self.margin)
        chosen: list[_Choice] = []
        if excess > 0:
            chosen = self._cheapest_cover(excess, self._candidates(layer, loads))
            for choice in chosen:
                self._plan[choice.op] = choice.action
        self._decide_s += time.perf_counter() - started
        self._decisions.append(
            {
                "layer": layer,
                "predicted_peak_bytes": int(predicted),
                "budget_bytes": self.budget.limit_bytes,
                "ops": [
                    {
                        "op": f"{c.op[0]}:{c.op[1]}:{c.op[2]}",
                        "action": c.action,
                        "bytes": int(c.bytes),
                        "cost_s": c.cost_s,
                    }
                    for c in chosen
                ],
            }
        )

    def _predicted_peak(self, layer: int, loads: list[int]) -> float:
        """Accounted now, plus what this micro-batch will still save if nothing changes."""
        n = self.tokens_per_microbatch
        expert_bpt = self.cost.expert.bytes_per_token
        attention_bpt = self.cost.attention.bytes_per_token
        this_layer = sum(loads) * expert_bpt
        later_layers = self._later(layer)
        later = len(later_layers)
        later_attention = sum(
            n * attention_bpt
            for later_layer in later_layers
            if self._plan.get(("attention", later_layer, -1), "keep") == "keep"
        )
        # Later layers' loads are unknown: assume this device gets as many tokens there as
        # here (a spike skews every layer of a micro-batch alike).
        later_experts = later * sum(loads) * expert_bpt
        # Saved outside the operators (router, norms, logits): what is left of the
        # calibrated total, after what this micro-batch saved outside operators so far.
        other_so_far = self.budget.saved_bytes() - self._start_saved - self._op_bytes_so_far
        other_left = max(self.cost.other_bytes - max(other_so_far, 0.0), 0.0)
        still_to_save = this_layer + later_attention + later_experts + other_left
        return self.budget.in_use_bytes() + still_to_save

    def _later(self, layer: int) -> list[int]:
        """The blocks this device still runs after ``layer`` in this micro-batch."""
        blocks = range(self.num_blocks) if self.blocks is None else self.blocks
        return [b for b in blocks if b > layer]

    def _candidates(self, layer: int, loads: list[int]) -> list[_Choice]:
        """For every operator still to run: its cheaper way of not keeping activations."""
        n = self.tokens_per_microbatch
        options: list[_Choice] = []
        for expert, count in enumerate(loads):
            if count:
                options.append(self._best(("expert", layer, expert), count, self.cost.expert))
        for later in self._later(layer):
            op = ("attention", later, -1)
            if op not in self._plan:
                options.append(self._best(op, n, self.cost.attention))
        return options

    def _best(self, op: Op, tokens: int, per_token: OpCost) -> _Choice:
        saved = tokens * per_token.bytes_per_token
        recompute_s = tokens * per_token.seconds_per_token
        offload_s = saved * self.cost.offload_seconds_per_byte
        if offload_s < recompute_s:
            return _Choice(op, "offload", saved, offload_s)
        return _Choice(op, "recompute", saved, recompute_s)

    @staticmethod
    def _cheapest_cover(excess: float, options: list[_Choice]) -> list[_Choice]:
        """Greedy by cost per byte saved until the excess is covered (all, if it cannot be)."""
        chosen, covered = [], 0.0
        for option in sorted(options, key=lambda c: c.cost_s / max(c.bytes, 1.0)):
            if covered >= excess:
                break
            chosen.append(option)
            covered += option.bytes
        return chosen
