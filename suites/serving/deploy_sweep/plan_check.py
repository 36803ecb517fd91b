"""The memory planner's check before an arm starts: ``[plan]`` beside ``[deploy_sweep]``.

Each arm's deployment is ``[plan]``'s (``plan.deploy`` or ``[plan.deployment]``: the
devices, their memory, the dtypes, the context) with the arm's knobs over the fields they
set: a knob named like a server flag the table below knows (``max_num_seqs``,
``tensor_parallel_size``, the reference target's ``max_running_requests`` ...), or one that
``deploy_sweep.plan_fields`` maps. ``devices`` follows tp x pp x dp when a knob sets one
of them. An arm whose deployment the planner says does not fit (its cache cannot hold its
running requests at full context, or the fixed parts exceed the memory), or which it
refuses (tp not dividing the heads ...), is never started: planned, not run. A start on an
accelerator costs minutes of loading weights; an out-of-memory there says less than this.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from moeperf.suites.plan.deploy import DeployConfig, parse_deploy
from moeperf.suites.plan.errors import PlanError
from moeperf.suites.plan.model_config import ModelShape
from moeperf.suites.plan.plan import plan_memory
from moeperf.suites.serving.mode_spec import GridValue

# Server flags (vLLM's, SGLang's, the reference target's knobs) -> the deployment field
# each sets. deploy_sweep.plan_fields adds to it, or overrides it.
KNOWN_FIELDS: dict[str, str] = {
    "max_running_requests": "max_running_requests",  # the reference target, SGLang
    "max_num_seqs": "max_running_requests",  # vLLM
    "chunked_prefill_size": "chunked_prefill_tokens",  # the reference target, SGLang
    "max_num_batched_tokens": "chunked_prefill_tokens",  # vLLM
    "mtp_tokens": "mtp_drafts",  # the reference target
    "num_speculative_tokens": "mtp_drafts",  # vLLM
    "speculative_num_draft_tokens": "mtp_drafts",  # SGLang
    "max_context_len": "max_context_tokens",  # the reference target
    "max_model_len": "max_context_tokens",  # vLLM
    "context_length": "max_context_tokens",  # SGLang
    "tensor_parallel_size": "tp",
    "tp_size": "tp",
    "tp": "tp",
    "pipeline_parallel_size": "pp",
    "pp_size": "pp",
    "pp": "pp",
    "data_parallel_size": "dp",
    "dp_size": "dp",
    "dp": "dp",
    "ep_size": "ep",
    "ep": "ep",
}
# What plan_fields may name: the deployment's fields an arm can vary.
SETTABLE = sorted(
    set(DeployConfig.model_fields) - {"memory_per_device_bytes", "memory_per_device_gib"}
)


@dataclass(frozen=True)
class ArmPlan:
    """The planner's word on one start of an arm."""

    fits: bool
    why: str  # "fits: ..." or what does not fit, in the planner's words


def knob_fields(knobs: list[str], plan_fields: dict[str, str]) -> dict[str, str]:
    """The knobs that set a deployment field, and the field each sets."""
    return {k: plan_fields.get(k) or KNOWN_FIELDS[k] for k in knobs
            if k in plan_fields or k in KNOWN_FIELDS}  # fmt: skip


def arm_deployment(
    base: DeployConfig, knobs: dict[str, GridValue], fields: dict[str, str]
) -> dict[str, Any]:
    """``base`` with the knobs' values over the fields they set (devices = tp x pp x dp when
    a knob sets one of those), unvalidated."""
    raw = base.model_dump()
    raw.update({field: knobs[knob] for knob, field in fields.items() if knob in knobs})
    if {"tp", "pp", "dp"} & {fields[k] for k in knobs if k in fields}:
        raw["devices"] = raw["tp"] * raw["pp"] * raw["dp"]
    return raw


def check_arm(
    shape: ModelShape, base: DeployConfig, knobs: dict[str, GridValue], fields: dict[str, str]
) -> ArmPlan:
    """Whether the arm's deployment fits (module docstring)."""
    try:
        deploy = parse_deploy(arm_deployment(base, knobs, fields), "the arm's deployment")
        plan = plan_memory(shape, deploy, suggest=False)
    except PlanError as exc:
        return ArmPlan(False, f"the planner refuses it: {exc}")
    if plan.overflow is not None:
        return ArmPlan(False, plan.overflow)
    return ArmPlan(
        True,
        f"fits: {plan.sequences_at_max_context} sequence(s) of {deploy.max_context_tokens:,} "
        f"tokens fit per replica, {deploy.running_per_replica} run",
    )
