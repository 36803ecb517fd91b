"""The plan: bytes per device by component, what is left for the cache, and the verdict.

free for cache = memory - weights - activations - communication - runtime reserve -
allocator headroom. One sequence at max context costs C * (KV bytes per token) + (linear
state bytes per sequence). The plan fits when the cache holds max_running_requests such
sequences (no running request can be preempted for memory). An over-budget plan names
what overflows and lists the changes that would fit, each checked by planning it again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from moeperf.suites.plan.activations import ActivationPlan, plan_activations
from moeperf.suites.plan.buffers import BufferPlan, plan_buffers
from moeperf.suites.plan.deploy import DeployConfig, check_fits_model, parse_deploy
from moeperf.suites.plan.errors import PlanError
from moeperf.suites.plan.kv import CachePlan, plan_cache
from moeperf.suites.plan.model_config import ModelShape
from moeperf.suites.plan.weights import WeightPlan, plan_weights


@dataclass(frozen=True)
class Change:
    description: str
    sequences_at_max_context: int


@dataclass(frozen=True)
class Plan:
    model: ModelShape
    deploy: DeployConfig
    weights: WeightPlan
    cache: CachePlan
    activations: ActivationPlan
    buffers: BufferPlan
    changes: tuple[Change, ...] = ()

    @property
    def fixed_bytes(self) -> dict[str, int]:
        """Everything but the cache, per device, by component."""
        parts = {f"weights.{k}": v for k, v in self.weights.bytes_per_device.items() if v}
        parts["activations"] = self.activations.bytes
        parts["communication buffers"] = self.buffers.communication
        parts["runtime reserve"] = self.buffers.runtime_reserve
        parts["allocator headroom"] = self.buffers.allocator
        return parts

    @property
    def free_for_cache(self) -> int:
        return self.deploy.memory_bytes - sum(self.fixed_bytes.values())

    @property
    def bytes_per_sequence_at_max_context(self) -> int:
        return (
            self.deploy.max_context_tokens * self.cache.bytes_per_token
            + self.cache.state_bytes_per_sequence
        )

    @property
    def sequences_at_max_context(self) -> int:
        return max(self.free_for_cache, 0) // max(self.bytes_per_sequence_at_max_context, 1)

    @property
    def kv_tokens(self) -> int:
        """KV tokens that fit once this replica's running sequences have their linear state."""
        left = (
            self.free_for_cache
            - self.deploy.running_per_replica * self.cache.state_bytes_per_sequence
        )
        return max(left, 0) // max(self.cache.bytes_per_token, 1)

    @property
    def needed_for_cache(self) -> int:
        return self.deploy.running_per_replica * self.bytes_per_sequence_at_max_context

    @property
    def fits(self) -> bool:
        return self.free_for_cache >= self.needed_for_cache

    @property
    def overflow(self) -> str | None:
        if self.fits:
            return None
        if self.free_for_cache < 0:
            name, size = max(self.fixed_bytes.items(), key=lambda kv: kv[1])
            return (
                f"the fixed parts exceed the device's memory by {-self.free_for_cache:,} bytes "
                f"before any cache; the largest is {name} ({size:,} bytes)"
            )
        return (
            f"kv cache: {self.deploy.running_per_replica} sequences (of "
            f"{self.deploy.max_running_requests} over dp {self.deploy.dp}) of "
            f"{self.deploy.max_context_tokens:,} tokens need {self.needed_for_cache:,} bytes, "
            f"{self.free_for_cache:,} are free (holds {self.sequences_at_max_context})"
        )


def plan_memory(model: ModelShape, deploy: DeployConfig, *, suggest: bool = True) -> Plan:
    check_fits_model(deploy, model)
    plan = Plan(
        model,
        deploy,
        plan_weights(model, deploy),
        plan_cache(model, deploy),
        plan_activations(model, deploy),
        plan_buffers(model, deploy),
    )
    if plan.fits or not suggest:
        return plan
    return Plan(**{**plan.__dict__, "changes": tuple(_changes(plan))})


def _try(plan: Plan, description: str, **update: Any) -> Change | None:
    try:
        deploy = parse_deploy({**plan.deploy.model_dump(), **update})
        again = plan_memory(plan.model, deploy, suggest=False)
    except PlanError:
        return None
    return Change(description, again.sequences_at_max_context) if again.fits else None


def _changes(plan: Plan) -> list[Change]:
    d, m = plan.deploy, plan.model
    found: list[Change | None] = []
    if m.num_experts:
        group = d.tp * d.dp
        for ep in (e for e in range(d.ep + 1, group + 1) if group % e == 0):
            found.append(_try(plan, f"ep {d.ep} -> {ep}", ep=ep))
            if found[-1]:
                break
        for factor in (2, 4, 8):
            found.append(
                _try(
                    plan,
                    f"{factor}x devices: dp {d.dp} -> {d.dp * factor}, ep {d.ep} -> "
                    f"{d.ep * factor} ({d.devices * factor} devices)",
                    dp=d.dp * factor,
                    ep=d.ep * factor,
                    devices=d.devices * factor,
                )
            )
            if found[-1]:
                break
    dp_attention = {"tp": 1, "dp": d.tp * d.dp} if d.tp > 1 else {}
    if dp_attention:  # SGLang's --enable-dp-attention: each device its own requests
        found.append(
            _try(
                plan,
                f"data-parallel attention: tp {d.tp} -> 1, dp {d.dp} -> {d.tp * d.dp}",
                **dp_attention,
            )
        )
    if d.kv_dtype != "fp8":
        found.append(_try(plan, f"kv_dtype {d.kv_dtype} -> fp8", kv_dtype="fp8"))
        if dp_attention:
            found.append(
                _try(
                    plan, "data-parallel attention and kv_dtype fp8", kv_dtype="fp8", **dp_attention
                )
            )
    order = ("fp32", "bf16", "fp8", "int4")
    for dtype in order[order.index(d.weight_dtype) + 1 :]:
        if dtype in ("fp8", "int4"):
            found.append(
                _try(plan, f"weight_dtype {d.weight_dtype} -> {dtype}", weight_dtype=dtype)
            )
    free = plan.free_for_cache
    if free > 0 and plan.cache.bytes_per_token:
        per_seq = free // d.running_per_replica - plan.cache.state_bytes_per_sequence
        context = per_seq // plan.cache.bytes_per_token
        if context >= 1:
            found.append(
                _try(
                    plan,
                    f"max_context_tokens {d.max_context_tokens:,} -> {context:,}",
                    max_context_tokens=context,
                )
            )
    running = plan.sequences_at_max_context * d.dp
    while running >= 1:  # fewer requests also shrink the activations: re-plan to confirm
        change = _try(
            plan,
            f"max_running_requests {d.max_running_requests} -> {running}",
            max_running_requests=running,
        )
        if change:
            found.append(change)
            break
        running -= d.dp if running > d.dp else 1
    return [c for c in found if c is not None]
