"""Distributed training specs (suite "training-dist"): the reference trainer as several
processes on torch.distributed, one scenario per layout x policy x skew.

``[trainer]`` is the training suite's table (suites/training/spec.py), less what a layout
decides (``pipeline_stages``, ``stage``, ``expert_parallel``: the one-process emulation's).
``[[matrix.layouts]]`` names each layout: ``ep`` (experts split over ranks, tokens moved by
all-to-all), ``pp`` (pipeline stages, 1F1B over send/recv), ``dp`` (replicas, gradients
summed); the world size is their product. ``budget_bytes`` applies to every rank;
``budget_ratio`` is a ratio of the highest rank's peak, measured per layout first
(keep-all, calm routing, no budget). ``[faults]`` is the training fault drill: SIGKILL one
rank once it has reported a step, in the layouts listed (all when none are). ``[telemetry]``
and ``[export]`` are the training suite's: the sampler beside every job, and the job's
steps exported live.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, model_validator

from moeperf.suites.errors import SpecError
from moeperf.suites.spec_errors import problems_of, spec_error
from moeperf.suites.telemetry_spec import TelemetrySpec
from moeperf.suites.training.spec import (
    PolicyName,
    SkewName,
    TrainerSpec,
    TrainingExportSpec,
    _Strict,
    _unique,
    model_config,
)
from moeperf.targets.training.distributed.layout import Layout, LayoutError

# TrainerSpec fields a layout decides; set in a training-dist spec, they are refused.
_SET_BY_LAYOUT = ("pipeline_stages", "stage", "expert_parallel")


class LayoutSpec(_Strict):
    # The layout's name in its scenarios' names (letters, digits, _ . -).
    name: Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")]
    # Expert parallel: ranks the experts are split over, tokens moved by all-to-all (must
    # divide the experts).
    ep: Annotated[int, Field(ge=1)] = 1
    # Pipeline parallel: stages, 1F1B over send/recv (must divide the layers).
    pp: Annotated[int, Field(ge=1)] = 1
    # Data parallel: replicas, gradients summed. The world size is ep x pp x dp, and
    # trainer.microbatches a multiple of ep x dp.
    dp: Annotated[int, Field(ge=1)] = 1

    def layout(self) -> Layout:
        return Layout(ep=self.ep, pp=self.pp, dp=self.dp)


class DistMatrixSpec(_Strict):
    # The parallel layouts; one scenario per layout x policy x skew.
    layouts: Annotated[list[LayoutSpec], Field(min_length=1)]
    # Activation policies, run on every rank: keep-all, full-recompute, selective, adaptive.
    policies: Annotated[list[PolicyName], Field(min_length=1)] = Field(
        default_factory=lambda: ["keep-all"]
    )
    # Routing skews: none, calm, spiky, replay (trainer.replay_path).
    skews: Annotated[list[SkewName], Field(min_length=1)] = Field(default_factory=lambda: ["calm"])

    @model_validator(mode="after")
    def _distinct(self) -> DistMatrixSpec:
        _unique([x.name for x in self.layouts], "matrix.layouts")
        _unique(list(self.policies), "matrix.policies")
        _unique(list(self.skews), "matrix.skews")
        return self


class FaultsSpec(_Strict):
    """SIGKILL rank ``kill_rank`` once it has reported step ``after_step``, ``delay_s`` later
    (mid-way through the next step); the launcher restarts the job from its checkpoint."""

    # The rank SIGKILLed (below every drilled layout's world size).
    kill_rank: Annotated[int, Field(ge=0)]
    # The kill comes once that rank has reported this step (at most trainer.steps - 2).
    after_step: Annotated[int, Field(ge=0)]
    # Seconds from that report to the kill.
    delay_s: Annotated[float, Field(ge=0)] = 0.0
    # The layouts whose scenarios get the drill; empty: every one.
    layouts: list[str] = Field(default_factory=list)


class DistTrainingSpec(_Strict):
    # The suite that runs this spec.
    suite: Literal["training-dist"] = "training-dist"
    # The spec's name: in the report's facts, and the suite label of the live and pushed
    # metrics.
    name: str
    # Free text, shown in the report's facts.
    description: str = ""
    # The training suite's [trainer], less pipeline_stages, stage and expert_parallel
    # (each layout decides them).
    trainer: TrainerSpec = TrainerSpec()
    # The scenarios: one per layout x policy x skew.
    matrix: DistMatrixSpec
    # Set: the fault drill, one rank SIGKILLed in the layouts listed.
    faults: FaultsSpec | None = None
    # Live Prometheus export while the jobs train: the job's steps (suites/training/dist_export.py).
    export: TrainingExportSpec = TrainingExportSpec()
    # The MFU denominator per rank; unset: measured on a CPU (one rank's threads), the
    # datasheet's on a GPU.
    peak_flops_per_s: Annotated[float, Field(gt=0)] | None = None
    # The accelerator sampler beside the jobs (suites/telemetry_spec.py): the harness's
    # process tree holds every rank.
    telemetry: TelemetrySpec = TelemetrySpec()

    @model_validator(mode="after")
    def _coherent(self) -> DistTrainingSpec:
        t = self.trainer
        fixed = [f"trainer.{name}" for name in _SET_BY_LAYOUT if name in t.model_fields_set]
        if fixed:
            raise ValueError(
                f"{', '.join(fixed)}: set by matrix.layouts in a training-dist spec "
                "(ep, pp, dp per layout)"
            )
        if "replay" in self.matrix.skews and t.replay_path is None:
            raise ValueError("matrix.skews 'replay' needs trainer.replay_path (a JSONL file)")
        if self.faults is not None:
            names = {x.name for x in self.matrix.layouts}
            unknown = [n for n in self.faults.layouts if n not in names]
            if unknown:
                raise ValueError(
                    f"faults.layouts {', '.join(unknown)}: not in matrix.layouts "
                    f"({', '.join(sorted(names))})"
                )
            if self.faults.after_step >= t.steps - 1:
                raise ValueError(
                    f"faults.after_step {self.faults.after_step} leaves no step to kill the "
                    f"rank in: trainer.steps is {t.steps}; give at most {t.steps - 2}"
                )
            for spec in self.drilled():
                if self.faults.kill_rank >= spec.layout().world_size:
                    raise ValueError(
                        f"faults.kill_rank {self.faults.kill_rank}: layout {spec.name!r} has "
                        f"ranks 0..{spec.layout().world_size - 1}"
                    )
        return self

    def drilled(self) -> list[LayoutSpec]:
        """The layouts whose scenarios get the fault drill."""
        if self.faults is None:
            return []
        wanted = self.faults.layouts
        return [x for x in self.matrix.layouts if not wanted or x.name in wanted]


def validate_training_dist(
    data: dict[str, Any], source: str, overrides: Sequence[str] = ()
) -> DistTrainingSpec:
    """The spec in ``data`` validated; a ``SpecError`` naming the field otherwise."""
    try:
        spec = DistTrainingSpec.model_validate(data)
    except ValidationError as exc:
        raise spec_error(source, problems_of(exc, DistTrainingSpec), overrides) from None
    model = model_config(spec.trainer)
    problems = []
    for layout_spec in spec.matrix.layouts:
        try:
            layout_spec.layout().check(
                model.num_experts, model.num_layers, spec.trainer.microbatches
            )
        except LayoutError as exc:
            problems.append(f"  matrix.layouts {layout_spec.name!r}: {exc}")
    if spec.trainer.device == "cuda":
        import torch

        count = torch.cuda.device_count()
        for layout_spec in spec.matrix.layouts:
            if layout_spec.layout().world_size > count:
                problems.append(
                    f"  matrix.layouts {layout_spec.name!r}: "
                    f"{layout_spec.layout().world_size} ranks, {count} GPUs"
                )
    if problems:
        raise SpecError("\n".join([f"{source}: invalid spec", *problems]))
    return spec
