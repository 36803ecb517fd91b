"""``[plan]``: the memory planner's KV prediction for each prompt length of a sweep.

For a length P and the most output tokens O a request asks for, one sequence holds
T = P + O tokens at its last one: ceil(T / block tokens) blocks, whose KV bytes are
blocks x block tokens x (KV bytes per token) (T x that without a block size), plus the
linear-attention state. The cache holds floor(cache blocks / blocks per sequence)
such sequences at once (without a block size: floor(cache bytes / bytes per sequence)).
The cache: the reference target's own num_kv_blocks (a setting, not a prediction); for
any other target, what the planner leaves free for it (``Plan.free_for_cache``). The
report draws c x blocks per sequence beside the measured blocks in use of level c, and the
predicted fit beside the measured one ([sweep.fit]).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from moeperf.collectors.sweep_records import SweepPlan, SweepPlanPoint
from moeperf.suites.errors import SpecError
from moeperf.suites.plan.deploy import DeployConfig, load_deploy, parse_deploy
from moeperf.suites.plan.errors import PlanError
from moeperf.suites.plan.model_config import ModelShape, load_model_config
from moeperf.suites.plan.plan import Plan, plan_memory
from moeperf.suites.serving.spec import ServingSpec
from moeperf.suites.serving.target_spec import reference_config
from moeperf.suites.spec_files import spec_data_path


@dataclass(frozen=True)
class ResolvedPlan:
    """A spec's [plan], read and planned: the plan and the cache its fits count in."""

    model_path: Path
    plan: Plan
    block_tokens: int | None
    cache_blocks: int | None  # the reference target's num_kv_blocks; None: from memory
    cache_source: str


def resolve_plan(spec: ServingSpec, source: str = "spec") -> ResolvedPlan:
    """The spec's [plan] planned; a config or deployment the planner cannot use is a
    SpecError (exit 2) naming [plan] and the problem."""
    given = spec.plan
    assert given is not None
    reference = reference_config(spec.target.reference) if spec.target.kind == "reference" else None
    try:
        if given.model is not None:
            model_path = spec_data_path(given.model)
        else:
            assert reference is not None  # the spec's validator requires a model otherwise
            from moeperf.suites.serving.embedded.reference import model_dir  # torch: only here

            model_path = model_dir(reference)
        if model_path.is_dir():
            model_path = model_path / "config.json"
        shape = load_model_config(model_path)
        if given.deploy is not None:
            deploy = load_deploy(spec_data_path(given.deploy))
        elif given.deployment:
            deploy = parse_deploy(given.deployment, "[plan.deployment]")
        else:
            assert reference is not None
            deploy = _reference_deployment(reference, shape)
        plan = plan_memory(shape, deploy, suggest=False)
    except PlanError as exc:
        raise SpecError(f"{source}: [plan]: {exc}") from None
    if reference is not None and given.deploy is None and not given.deployment:
        blocks = reference.num_kv_blocks
        return ResolvedPlan(
            model_path,
            plan,
            given.block_tokens or reference.block_size,
            blocks,
            f"the reference target's num_kv_blocks ({blocks} blocks of "
            f"{reference.block_size} tokens), a setting",
        )
    block_tokens = given.block_tokens or (reference.block_size if reference else None)
    return ResolvedPlan(
        model_path,
        plan,
        block_tokens,
        None,
        f"what the planner leaves free for the cache per device ({plan.free_for_cache:,} bytes)",
    )


def _reference_deployment(reference: Any, shape: ModelShape) -> DeployConfig:
    """The reference target's own deployment: one device, its engine's knobs. Its memory
    is not what sizes its cache (num_kv_blocks does): 1 GiB, unused by the prediction."""
    dtype = "fp32" if reference.dtype == "float32" else "bf16"
    chunk = reference.chunked_prefill_size or reference.max_context_len
    return parse_deploy(
        {
            "devices": 1,
            "memory_per_device_gib": 1.0,
            "weight_dtype": dtype,
            "kv_dtype": dtype,
            "activation_dtype": dtype,
            "max_context_tokens": reference.max_context_len,
            "max_running_requests": reference.max_running_requests,
            "chunked_prefill_tokens": chunk,
            "mtp_drafts": reference.mtp_tokens if shape.mtp_depth else 0,
            "layout": "reference",
        },
        "the reference target's deployment",
    )


def sweep_plan(resolved: ResolvedPlan, lengths: list[int], max_output_tokens: int) -> SweepPlan:
    """The prediction for each prompt length (module docstring)."""
    plan, bs = resolved.plan, resolved.block_tokens
    per_token, state = plan.cache.bytes_per_token, plan.cache.state_bytes_per_sequence
    cache_bytes = (
        resolved.cache_blocks * (bs or 0) * per_token
        if resolved.cache_blocks is not None
        else max(plan.free_for_cache, 0)
    )
    cache_blocks = resolved.cache_blocks
    if cache_blocks is None and bs:
        cache_blocks = cache_bytes // (bs * per_token) if per_token else None
    points = []
    for length in lengths:
        tokens = length + max_output_tokens
        blocks = -(-tokens // bs) if bs else None
        if blocks is not None and cache_blocks is not None:
            fit = cache_blocks // blocks
        else:
            fit = cache_bytes // max(tokens * per_token + state, 1)
        kv_bytes = (blocks * (bs or 0) if blocks is not None else tokens) * per_token
        points.append(SweepPlanPoint(length, tokens, kv_bytes, blocks, fit))
    d = plan.deploy
    deployment = (
        f"{d.devices} device(s), tp {d.tp} ep {d.ep} pp {d.pp} dp {d.dp}, weights "
        f"{d.weight_dtype}, KV {d.kv_dtype}, context {d.max_context_tokens:,}, "
        f"{d.max_running_requests} running, MTP drafts {d.mtp_drafts}, layout {d.layout}"
    )
    return SweepPlan(
        model=str(resolved.model_path),
        deployment=deployment,
        kv_bytes_per_token=per_token,
        state_bytes_per_sequence=state,
        block_tokens=bs,
        cache_bytes=cache_bytes,
        cache_blocks=cache_blocks,
        cache_source=resolved.cache_source,
        points=tuple(points),
    )
