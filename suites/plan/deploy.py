"""The deployment a plan is for, validated at the edge (pydantic, unknown fields refused).

A TOML or JSON file. The parallel layout follows vLLM and SGLang: devices = tp * pp * dp;
inside a pipeline stage the tp * dp devices form the MoE group, in which ep divides the
experts and each expert is tensor-split over the remaining (tp * dp) / ep devices.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from moeperf.suites.plan.errors import PlanError
from moeperf.suites.plan.model_config import ModelShape

GIB = 1024**3
WeightDtype = Literal["fp32", "bf16", "fp8", "int4"]
KVDtype = Literal["fp32", "bf16", "fp8"]


class DeployConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    devices: int = Field(ge=1)
    memory_per_device_bytes: int | None = Field(default=None, ge=1)
    memory_per_device_gib: float | None = Field(default=None, gt=0)
    tp: int = Field(default=1, ge=1)
    ep: int = Field(default=1, ge=1)
    pp: int = Field(default=1, ge=1)
    dp: int = Field(default=1, ge=1)
    weight_dtype: WeightDtype = "bf16"
    kv_dtype: KVDtype = "bf16"
    activation_dtype: Literal["fp32", "bf16"] = "bf16"
    linear_state_dtype: Literal["fp32", "bf16"] = "fp32"  # recurrent state of linear layers
    max_context_tokens: int = Field(ge=1)
    max_running_requests: int = Field(ge=1)  # the whole deployment's, over dp replicas
    chunked_prefill_tokens: int = Field(default=8192, ge=1)
    mtp_drafts: int = Field(default=0, ge=0)
    # "standard": vLLM/SGLang (MTP layers get KV only when drafting). "reference": our
    # engine (targets/serving/engine): one KV slot per MTP module always, and with drafts a
    # hidden-state cache entry per token.
    layout: Literal["standard", "reference"] = "standard"
    runtime_reserve_gib: float = Field(default=1.0, ge=0)  # CUDA context, cuBLAS, graphs
    allocator_fraction: float = Field(default=0.05, ge=0, lt=1)  # fragmentation headroom

    @model_validator(mode="after")
    def _layout(self) -> DeployConfig:
        if (self.memory_per_device_bytes is None) == (self.memory_per_device_gib is None):
            raise ValueError("give exactly one of memory_per_device_bytes, memory_per_device_gib")
        if self.devices != self.tp * self.pp * self.dp:
            raise ValueError(
                f"devices ({self.devices}) must equal tp * pp * dp "
                f"({self.tp} * {self.pp} * {self.dp} = {self.tp * self.pp * self.dp})"
            )
        if (self.tp * self.dp) % self.ep:
            raise ValueError(
                f"ep ({self.ep}) must divide tp * dp ({self.tp * self.dp}): expert-parallel "
                "ranks are the tp * dp devices of a pipeline stage"
            )
        return self

    @property
    def memory_bytes(self) -> int:
        if self.memory_per_device_bytes is not None:
            return self.memory_per_device_bytes
        return int(float(self.memory_per_device_gib or 0) * GIB)

    @property
    def moe_tp(self) -> int:
        """Devices one expert is tensor-split over."""
        return self.tp * self.dp // self.ep

    @property
    def running_per_replica(self) -> int:
        """max_running_requests counts the whole deployment; each data-parallel replica
        (its own scheduler and KV cache) runs its share, rounded up."""
        return -(-self.max_running_requests // self.dp)

    @property
    def decode_tokens(self) -> int:
        return self.running_per_replica * (1 + self.mtp_drafts)


def parse_deploy(raw: object, source: str = "deployment") -> DeployConfig:
    try:
        return DeployConfig.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'deployment'}: {e['msg']}"
            for e in exc.errors()
        )
        raise PlanError(f"{source}: {problems}") from exc


def load_deploy(path: Path) -> DeployConfig:
    path = Path(path)
    try:
        text = path.read_text()
        raw = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (OSError, ValueError) as exc:
        raise PlanError(f"cannot read deployment {path}: {exc}") from exc
    return parse_deploy(raw, str(path))


def check_fits_model(deploy: DeployConfig, model: ModelShape) -> None:
    """Every way the parallel sizes fail to divide the model, named in one error."""
    problems = []
    if model.num_heads % deploy.tp:
        problems.append(
            f"attention heads ({model.num_heads}) are not divisible by tp ({deploy.tp})"
        )
    if (
        model.attention == "gqa"
        and model.num_kv_heads % deploy.tp
        and deploy.tp % model.num_kv_heads
    ):
        problems.append(
            f"kv heads ({model.num_kv_heads}) and tp ({deploy.tp}): one must divide the other"
        )
    if model.num_experts and model.num_experts % deploy.ep:
        problems.append(f"experts ({model.num_experts}) are not divisible by ep ({deploy.ep})")
    if model.num_experts and model.expert_intermediate % deploy.moe_tp:
        problems.append(
            f"expert intermediate size ({model.expert_intermediate}) is not divisible by "
            f"the expert tensor split (tp * dp / ep = {deploy.moe_tp})"
        )
    if not model.num_experts and deploy.ep > 1:
        problems.append(f"ep ({deploy.ep}) > 1 but the model has no experts")
    if model.num_layers % deploy.pp:
        problems.append(f"layers ({model.num_layers}) are not divisible by pp ({deploy.pp})")
    if model.linear is not None:
        for name in ("num_k_heads", "num_v_heads"):
            heads = getattr(model.linear, name)
            if heads % deploy.tp:
                problems.append(
                    f"linear-attention {name} ({heads}) not divisible by tp ({deploy.tp})"
                )
    if deploy.mtp_drafts and not model.mtp_depth:
        problems.append(f"mtp_drafts ({deploy.mtp_drafts}) > 0 but the model has no MTP module")
    if problems:
        raise PlanError(
            f"deployment does not fit the {model.model_type} model: " + "; ".join(problems)
        )
