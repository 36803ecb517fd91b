"""Training suite specs: a [trainer] table and a [matrix] of policies, skews and sizes.

``[trainer]`` takes the fields of the reference trainer's ``TrainerConfig`` (read from the
dataclass, so the two never drift apart), ``[trainer.model]`` those of ``MoEConfig``;
the policy and the routing skew come from ``[matrix]``, one scenario per combination.
The device-memory budget is ``budget_bytes``, or ``budget_ratio`` times the peak the
runner measures first: keep-all under the calm skew for ``budget_calibration_steps``
steps (the highest step's peak). A ratio a little above 1 puts the budget between the
calm and the spiky peaks, which is where the OOM suite wants it. ``max_ooms`` stops a
scenario that keeps crashing.

Validation is pydantic's, then the trainer's own: every scenario's ``TrainerConfig`` is
validated, a replay file is read and checked against the model, and a budget below the
weights, gradients and optimizer state is refused, all before anything runs (exit 2).
"""

from __future__ import annotations

import dataclasses
import json
import typing
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, Field, create_model, model_validator

from moeperf.suites.errors import SpecError
from moeperf.suites.spec_base import STRICT
from moeperf.suites.telemetry_spec import TelemetrySpec
from moeperf.targets.model.checkpoint import default_model_dir
from moeperf.targets.model.config import MoEConfig
from moeperf.targets.training.policies import POLICY_NAMES
from moeperf.targets.training.setup import TrainerConfig
from moeperf.targets.training.skew import PROFILE_NAMES

# TrainerConfig fields the spec sets another way: policy and skew per scenario from the
# matrix, the model as its own table, the checkpoint directory inside the run by default,
# and rank / world size by the runner (one process, rank 0).
_SET_ELSEWHERE = ("policy", "skew", "model", "checkpoint_dir", "rank", "world_size")
NO_INIT = "none"  # TOML has no null: init_from = "none" trains from random weights


class _Strict(BaseModel):
    model_config = STRICT


def _dataclass_fields(
    cls: type, skip: tuple[str, ...] = (), optional: bool = False
) -> dict[str, Any]:
    """pydantic field definitions of a dataclass's fields: its types and defaults (or
    ``None`` defaults with ``optional``, for a table of overrides)."""
    hints = typing.get_type_hints(cls)
    found: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        if optional:
            found[f.name] = (hints[f.name] | None, None)
        elif f.default is not dataclasses.MISSING:
            found[f.name] = (hints[f.name], f.default)
        elif f.default_factory is not dataclasses.MISSING:
            found[f.name] = (hints[f.name], Field(default_factory=f.default_factory))
        else:
            found[f.name] = (hints[f.name], ...)  # required, as in the dataclass
    return found


def _moe_config(fields: dict[str, Any]) -> MoEConfig:
    try:
        return MoEConfig(**fields)
    except (TypeError, ValueError) as exc:
        raise ValueError(str(exc)) from None


_ModelFields = create_model("_ModelFields", __base__=_Strict, **_dataclass_fields(MoEConfig))


class ModelSpec(_ModelFields):
    """The model's shape (``MoEConfig``), used when ``init_from = "none"``."""

    # The fields' comments are MoEConfig's (docs/reference/spec-fields.md).
    documented_by: ClassVar[tuple[type, ...]] = (MoEConfig,)

    @model_validator(mode="after")
    def _consistent(self) -> ModelSpec:
        _moe_config(self.model_dump())
        return self

    def config(self) -> MoEConfig:
        return MoEConfig(**self.model_dump())


_SizeFields = create_model(
    "_SizeFields", __base__=_Strict, **_dataclass_fields(MoEConfig, optional=True)
)


class SizeSpec(_SizeFields):
    """One model size of the matrix: a name and the ``MoEConfig`` fields it overrides."""

    # The fields' comments are MoEConfig's (docs/reference/spec-fields.md).
    documented_by: ClassVar[tuple[type, ...]] = (MoEConfig,)

    # The size's name in its scenarios' names (letters, digits, _ . -).
    name: Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")]

    def overrides(self) -> dict[str, Any]:
        return {k: v for k, v in self.model_dump(exclude={"name"}).items() if v is not None}


_TrainerFields = create_model(
    "_TrainerFields", __base__=_Strict, **_dataclass_fields(TrainerConfig, _SET_ELSEWHERE)
)


class TrainerSpec(_TrainerFields):
    """``TrainerConfig``'s fields, plus where the checkpoints and the budget come from."""

    # The fields' comments are TrainerConfig's, unless this class has its own
    # (docs/reference/spec-fields.md).
    documented_by: ClassVar[tuple[type, ...]] = (TrainerConfig,)

    # The TrainerConfig fields this suite reads by name, declared again so that a type
    # checker sees them (it cannot see fields made at run time); defaults and types are
    # TrainerConfig's, and pydantic keeps each in its place among the others.

    mtp: bool = TrainerConfig.mtp
    dtype: str = TrainerConfig.dtype
    device: str = TrainerConfig.device
    threads: int = TrainerConfig.threads
    replay_path: str | None = TrainerConfig.replay_path
    steps: int = TrainerConfig.steps
    microbatches: int = TrainerConfig.microbatches
    # The model's shape ([trainer.model]), used only with init_from = "none".
    model: ModelSpec = ModelSpec()
    # A model directory, "default" (the shipped model) or "none" (random weights of `model`).
    init_from: str = "default"
    # "" = a directory inside the run, deleted after each scenario (checkpoints are large).
    checkpoint_dir: str = ""
    # The device-memory budget in bytes (training-dist: of every rank); not with
    # budget_ratio. Neither set: no budget.
    budget_bytes: Annotated[int, Field(gt=0)] | None = None
    # The budget as this times a peak measured first, with no budget, keep-all under calm
    # routing: the highest step's (per model size), training-dist the highest rank's (per
    # layout).
    budget_ratio: Annotated[float, Field(gt=0)] | None = None
    # Steps of the peak measurement that budget_ratio multiplies.
    budget_calibration_steps: Annotated[int, Field(ge=1)] = 2
    # A scenario stops after this many OOMs (unset: as many as it has steps); what it
    # measured is kept and its summary says it stopped. A budget every step crosses would
    # otherwise restart forever.
    max_ooms: Annotated[int, Field(ge=1)] | None = None

    @model_validator(mode="after")
    def _budget_once(self) -> TrainerSpec:
        if self.budget_bytes is not None and self.budget_ratio is not None:
            raise ValueError("give trainer.budget_bytes or trainer.budget_ratio, not both")
        if "model" in self.model_fields_set and self.init_from != NO_INIT:
            raise ValueError(
                f"trainer.model is used only with init_from = {NO_INIT!r}; with "
                f"init_from = {self.init_from!r} the model directory's config applies"
            )
        return self

    @property
    def init_dir(self) -> str | None:
        return None if self.init_from == NO_INIT else self.init_from


# Literals of the name tuples, for pydantic to check and list; mypy takes literal values only.
PolicyName = Literal[POLICY_NAMES]  # type: ignore[valid-type]  # a tuple, read at run time
SkewName = Literal[PROFILE_NAMES]  # type: ignore[valid-type]  # a tuple, read at run time


def _unique(values: list[str], where: str) -> None:
    repeated = sorted({v for v in values if values.count(v) > 1})
    if repeated:
        raise ValueError(f"{where} lists {', '.join(repeated)} more than once")


class MatrixSpec(_Strict):
    """One scenario per policy x skew (x size)."""

    # Activation policies: keep-all, full-recompute, selective (expert SwiGLUs always
    # recomputed), adaptive (recompute or offload only where the budget would be crossed).
    policies: Annotated[list[PolicyName], Field(min_length=1)]
    # Routing skews: none, calm, spiky, replay (trainer.replay_path).
    skews: Annotated[list[SkewName], Field(min_length=1)] = ["calm"]
    # Model sizes, each overriding [trainer.model] fields (needs init_from = "none");
    # empty: the one model.
    sizes: list[SizeSpec] = []
    # "sequential": each scenario to its end, then the next. "interleaved": one step of
    # each in turn, every trainer alive at once, so a host whose speed drifts over the run
    # slows all scenarios alike and their step times compare side by side (CPU only).
    order: Literal["sequential", "interleaved"] = "sequential"

    @model_validator(mode="after")
    def _distinct(self) -> MatrixSpec:
        _unique(list(self.policies), "matrix.policies")
        _unique(list(self.skews), "matrix.skews")
        _unique([s.name for s in self.sizes], "matrix.sizes")
        return self


class TrainingExportSpec(_Strict):
    """Live Prometheus export (``collectors.export.live_export``) while the run trains."""

    # Serve the run's metrics at http://127.0.0.1:PORT/metrics while it trains.
    live_metrics: bool = False
    # 0 picks a free port (printed at start); Prometheus needs a fixed one.
    metrics_port: Annotated[int, Field(ge=0, le=65535)] = 0


class TrainingSpec(_Strict):
    # The suite that runs this spec.
    suite: Literal["training"] = "training"
    # The spec's name: in the report's facts, and the suite label of the live and pushed
    # metrics.
    name: str
    # Free text, shown in the report's facts.
    description: str = ""
    # "mfu" or "oom_rate" (needs a budget: trainer.budget_bytes or trainer.budget_ratio);
    # recorded in the run's summary.
    kind: Literal["mfu", "oom_rate"]
    # The reference trainer's settings, shared by every scenario.
    trainer: TrainerSpec = TrainerSpec()
    # The scenarios: one per policy x skew (x size).
    matrix: MatrixSpec
    # Live Prometheus export while the run trains.
    export: TrainingExportSpec = TrainingExportSpec()
    # The MFU denominator; unset: measured on a CPU, the datasheet's on a GPU.
    peak_flops_per_s: Annotated[float, Field(gt=0)] | None = None
    # The accelerator sampler beside the steps (suites/telemetry_spec.py).
    telemetry: TelemetrySpec = TelemetrySpec()

    @model_validator(mode="after")
    def _coherent(self) -> TrainingSpec:
        t = self.trainer
        if self.kind == "oom_rate" and t.budget_bytes is None and t.budget_ratio is None:
            raise ValueError(
                "kind 'oom_rate' needs a budget: trainer.budget_bytes or trainer.budget_ratio"
            )
        if self.matrix.order == "interleaved" and t.device != "cpu":
            raise ValueError(
                "matrix.order 'interleaved' keeps every scenario's trainer alive at once; on "
                f"{t.device!r} the allocator's peak would count them all: use 'sequential'"
            )
        if self.matrix.sizes and t.init_dir is not None:
            raise ValueError(f"matrix.sizes needs trainer.init_from = {NO_INIT!r}")
        base = t.model.model_dump()
        for size in self.matrix.sizes:
            try:
                _moe_config({**base, **size.overrides()})
            except ValueError as exc:
                raise ValueError(f"matrix.sizes {size.name!r}: {exc}") from None
        if t.replay_path is not None and "replay" not in self.matrix.skews:
            raise ValueError("trainer.replay_path is read only when matrix.skews lists 'replay'")
        if "replay" in self.matrix.skews and t.replay_path is None:
            raise ValueError("matrix.skews 'replay' needs trainer.replay_path (a JSONL file)")
        return self


def model_config(trainer: TrainerSpec, overrides: dict[str, Any] | None = None) -> MoEConfig:
    """The model a scenario trains: the spec's, or the directory's it starts from (read
    from its config.json), without the MTP module when ``mtp`` is off."""
    if trainer.init_dir is None:
        config = MoEConfig(**{**trainer.model.model_dump(), **(overrides or {})})
    else:
        path = default_model_dir() if trainer.init_dir == "default" else Path(trainer.init_dir)
        try:
            config = MoEConfig.from_hf(json.loads((path / "config.json").read_text()))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise SpecError(
                f"trainer.init_from: {path} is not a model directory with a valid "
                f"config.json ({exc}); give a model directory, 'default' or {NO_INIT!r}"
            ) from None
    return config if trainer.mtp else dataclasses.replace(config, mtp_depth=0)
