"""Cluster-simulation specs (``suite = "simulation"``): jobs the simulator runs under each
policy and skew, the ablation against a baseline, and published runs to reproduce.

``[[job]]``: a model (a preset of targets/cluster_sim/presets.py or a path to a Hugging
Face config.json), a cluster preset with the job's device count, the layout (tensor,
pipeline, virtual_stages, expert, context; data is what is left) and the batch.
``[[reproduce]]``: the same, plus the published figure, its unit and its source. Every job
is built into a ``SimConfig`` and validated when the spec is: a layout that does not
divide the model or the devices is a SpecError naming each mismatch (exit 2), before
anything runs.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field, ValidationError, model_validator

from moeperf.collectors.dist_training_summary import DistTrainingSummary
from moeperf.collectors.errors import CollectorError
from moeperf.collectors.summary_json import summary_from_json
from moeperf.suites.errors import SpecError
from moeperf.suites.spec_base import NonNegative, Positive, Strict
from moeperf.suites.spec_errors import problems_of, spec_error
from moeperf.suites.spec_files import spec_data_path
from moeperf.targets.cluster_sim import presets
from moeperf.targets.cluster_sim.config import ClusterSimConfigError, Parallel, SimConfig
from moeperf.targets.cluster_sim.recipe import DataParallelComm, Dispatcher, Precision, Recipe
from moeperf.targets.cluster_sim.routing import SkewName
from moeperf.targets.cluster_sim.simulate import SIM_POLICIES, SimPolicy
from moeperf.targets.training.skew import SkewProfileError, read_replay_file

_SKEWS: tuple[SkewName, ...] = ("calm", "spiky")
Count = Annotated[int, Field(ge=1)]
Efficiency = Annotated[float, Field(gt=0, le=1)]


class JobSpec(Strict):
    """One simulated job: model, cluster, layout, batch."""

    # The job's name, unique in the spec; its scenarios are named NAME/POLICY/SKEW.
    name: str
    model: str  # a preset name or a path to a Hugging Face config.json
    seq_len: Count | None = None  # default: the model's (presets) or 4,096 (config.json)
    # A cluster preset (h100, h800, b200, gb200, seed-000; targets/cluster_sim/presets.py):
    # the device's peak, memory and links.
    cluster: str = "h100"
    # Devices in the job; data parallel is devices / (tensor x pipeline x context).
    devices: Count
    # Tensor-parallel ranks.
    tensor: Count = 1
    # Pipeline-parallel stages.
    pipeline: Count = 1
    # Model chunks per pipeline rank (interleaved 1F1B when > 1).
    virtual_stages: Count = 1
    # Expert-parallel ranks the experts are spread over (from tensor x data x context).
    expert: Count = 1
    # Context-parallel ranks (each holds a share of every sequence).
    context: Count = 1
    expert_tensor: Count = 1  # each expert split over this many ranks (MoE parallel folding)
    uneven_layers: bool = False  # layers pipeline x virtual_stages does not divide: allowed
    fsdp: bool = False  # weights and gradients sharded over data parallel too (ZeRO-3)
    global_batch: Count  # sequences per optimizer step
    # Sequences per micro-batch.
    micro_batch: Count = 1
    # MTP modules trained (default: the model's; a run without MTP sets 0).
    mtp_depth: Annotated[int, Field(ge=0)] | None = None
    # Share of peak reached by GEMMs and by links: assumptions unless calibrated.
    # GEMMs' share of the peak; unset: the cluster's (0.6), or on a [[reproduce]] row the
    # calibrated value where [calibration] fits it.
    gemm_efficiency: Efficiency | None = None
    # Share of the links' bandwidth reached; unset: the cluster's (0.7; 1 with links_from),
    # or on a [[reproduce]] row the calibrated value where [calibration] fits it.
    comm_efficiency: Efficiency | None = None
    # Share of the FP8 peak reached by FP8 GEMMs (precision = "fp8"); unset: the cluster's
    # (0.6), or on a [[reproduce]] row the calibrated value where [calibration] fits it.
    fp8_gemm_efficiency: Efficiency | None = None
    # What the framework does (targets/cluster_sim/recipe.py, each option's source there):
    # off unless the simulated run's recipe turns it on. precision = "fp8": the transformer
    # blocks' GEMMs run at the device's FP8 peak and fp8_gemm_efficiency.
    precision: Precision = "bf16"
    # The all-to-all dispatch sends FP8 activations plus one fp32 scale per 128 elements
    # (the combine stays BF16).
    fp8_dispatch: bool = False
    # "alltoall": every routed slot sent on its own (NCCL's all-to-all); "deepep":
    # DeepEP's kernels (once per remote scale-up domain, forwarded inside it).
    dispatcher: Dispatcher = "alltoall"
    # The expert-parallel all-to-all of one micro-batch runs under another's compute
    # (DualPipe, Megatron-LM's 1F1B A2A overlap).
    a2a_overlap: bool = False
    # Tensor-parallel all-gathers and reduce-scatters run under the GEMMs they feed.
    tp_comm_overlap: bool = False
    # The data-parallel gradient and parameter collectives: "hidden" (not charged),
    # "overlapped" (under compute, charging what does not fit), "exposed" (all charged).
    dp_comm: DataParallelComm = "hidden"
    # A training-dist run (its directory or summary.json): the links it measured replace the
    # cluster's, the all-to-all's bytes/s as scale-up, the pipeline ping-pong's as
    # scale-out, at efficiency 1 (measured bytes/s are achieved ones) unless given.
    links_from: str | None = None

    def config(self) -> SimConfig:
        """The validated simulator config (ClusterSimConfigError naming each mismatch)."""
        cluster = presets.cluster(self.cluster)
        changes: dict[str, Any] = {"devices": self.devices}
        if self.links_from is not None:
            changes |= measured_links(self.links_from)
        if self.gemm_efficiency is not None:
            changes["gemm_efficiency"] = self.gemm_efficiency
        if self.comm_efficiency is not None:
            changes["comm_efficiency"] = self.comm_efficiency
        if self.fp8_gemm_efficiency is not None:
            changes["fp8_gemm_efficiency"] = self.fp8_gemm_efficiency
        layout = Parallel(
            tensor=self.tensor, pipeline=self.pipeline, virtual_stages=self.virtual_stages,
            expert=self.expert, context=self.context, expert_tensor=self.expert_tensor,
            uneven_layers=self.uneven_layers, fsdp=self.fsdp,
        )  # fmt: skip
        # The recipe's fields are the job's of the same names.
        recipe = Recipe(**{f.name: getattr(self, f.name) for f in dataclasses.fields(Recipe)})
        model = presets.model(self.model, self.seq_len)
        if self.mtp_depth is not None:
            model = dataclasses.replace(model, mtp_depth=self.mtp_depth)
        cfg = SimConfig(
            model, layout,
            dataclasses.replace(cluster, **changes), self.global_batch, self.micro_batch, recipe,
        )  # fmt: skip
        cfg.validate()
        return cfg


def measured_links(source: str) -> dict[str, Any]:
    """Cluster fields from the links a training-dist run measured (``links_from``)."""
    path = Path(source)
    path = path / "summary.json" if path.is_dir() else path
    try:
        summary = summary_from_json(json.loads(path.read_text()), str(path))
    except (OSError, ValueError, CollectorError) as exc:
        raise ClusterSimConfigError(f"links_from: cannot read {path}: {exc}") from None
    if not isinstance(summary, DistTrainingSummary):
        raise ClusterSimConfigError(
            f"links_from: {path} is the summary of a {summary.SUITE!r} run; give a "
            "training-dist run (moeperf run training-dist)"
        )
    link = summary.link
    missing = [name for name, value in (
        ("all-to-all (an ep layout)", link.all_to_all_bytes_per_s),
        ("pipeline send/recv (a pp layout)", link.pipeline_bytes_per_s),
    ) if value is None]  # fmt: skip
    if missing:
        raise ClusterSimConfigError(
            f"links_from: {path} measured no {' and no '.join(missing)}; run layouts with "
            "ep > 1 and pp > 1"
        )
    return {
        "scale_up_bytes_per_s": link.all_to_all_bytes_per_s,
        "scale_out_bytes_per_s": link.pipeline_bytes_per_s,
        "comm_efficiency": 1.0,
    }


Role = Literal["calibration", "validation", "reference"]


class ReproduceSpec(JobSpec):
    """A published run: its job, the figure it reports and where. ``role``: whether the
    calibration fits on it, holds it out to validate, or neither (no calibration)."""

    # The activation policy the row is simulated under.
    policy: SimPolicy = "selective"
    # The routing skew the row is simulated under.
    skew: SkewName = "calm"
    # The published figure's unit, in which the simulated figure is given too: tokens/s
    # per GPU or TFLOP/s per GPU.
    metric: Literal["tokens/s/GPU", "TFLOP/s/GPU"]
    # The published figure, in metric's unit.
    published: Positive
    # Where the figure was published.
    source: str
    # "calibration": the fit uses it; "validation": held out to judge the fit;
    # "reference": neither (no calibration).
    role: Role = "reference"


class NotTakenSpec(Strict):
    """A published row the simulator cannot take: listed with its figure and why."""

    # The published run's name.
    name: str
    # Its published figure, in metric's unit.
    published: Positive
    # The unit of the figure: tokens/s per GPU, or TFLOP/s per GPU.
    metric: Literal["tokens/s/GPU", "TFLOP/s/GPU"]
    # Where the figure was published.
    source: str
    # Why the simulator cannot take the row.
    reason: str


Fittable = Literal["gemm_efficiency", "fp8_gemm_efficiency", "comm_efficiency"]


class CalibrationSettings(Strict):
    """Constants fitted on the ``role = "calibration"`` rows and used for every published
    row that does not set its own; at most a third of the calibrated rows may fit them."""

    # The constants fitted, by least squares on log(simulated / published), each bounded
    # to 0.05 to 1.
    fit: list[Fittable] = Field(min_length=1)
    iterations: Count = 2  # per simulation while fitting (balanced routing repeats itself)
    # The most function evaluations of the least-squares fit (scipy's max_nfev), each
    # simulating every calibration row.
    max_evaluations: Count = 200


class SimSettings(Strict):
    # Training iterations simulated per scenario.
    iterations: Count = 100
    # Seed of the routing draws.
    seed: int = 0
    # The activation policies every [[job]] runs under (one scenario each).
    policies: list[SimPolicy] = Field(default_factory=lambda: list(SIM_POLICIES), min_length=1)
    # The routing skews every [[job]] runs under (one scenario each).
    skews: list[SkewName] = Field(default_factory=lambda: list(_SKEWS), min_length=1)
    # The ablation's reference: its speedups are effective tokens/s over this policy's.
    baseline: SimPolicy = "full-recompute"
    # Iterations between checkpoints; an OOM loses the work since the last one.
    checkpoint_every: Count = 50
    checkpoint_write_s: NonNegative = 15.0  # seed 003: checkpoint writes cut to ~15 s
    restart_s: NonNegative = 300.0  # seed 000: restart and reload, "hundreds of seconds"
    # Skew "replay": the reference trainer's replay file (one micro-batch's tokens per
    # expert per layer a line; looped), as given, else under the shipped specs.
    replay_file: str = ""

    def replay_counts(self) -> np.ndarray | None:
        """The replay file's loads ``[lines, layers, E]`` (None without a file); a file
        that cannot be read, or rows of unequal shape, is a SpecError."""
        if not self.replay_file:
            return None
        try:
            _, loads = read_replay_file(spec_data_path(self.replay_file))
            return np.array(loads, dtype=np.float64)
        except (SkewProfileError, ValueError) as exc:
            raise SpecError(f"sim.replay_file: {exc}") from None


class SimulationSpec(Strict):
    # The suite that runs this spec.
    suite: Literal["simulation"] = "simulation"
    # The spec's name, shown in the report's facts.
    name: str
    # Free text, shown in the report's facts.
    description: str = ""
    # What every simulation shares: iterations, seed, policies, skews, checkpoints.
    sim: SimSettings = SimSettings()
    # Jobs simulated under every policy and skew of [sim].
    job: list[JobSpec] = Field(default_factory=list)
    # Published runs simulated and compared with their figures.
    reproduce: list[ReproduceSpec] = Field(default_factory=list)
    # Published runs the simulator cannot take, listed with the reason.
    not_taken: list[NotTakenSpec] = Field(default_factory=list)
    # Set: constants fitted on the role = "calibration" rows of [[reproduce]].
    calibration: CalibrationSettings | None = None

    @model_validator(mode="after")
    def _something_to_run(self) -> SimulationSpec:
        if not self.job and not self.reproduce:
            raise ValueError("a simulation spec needs at least one [[job]] or [[reproduce]]")
        names = [j.name for j in (*self.job, *self.reproduce)]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"job and reproduce names must be unique; repeated: {repeated}")
        replays = "replay" in self.sim.skews or any(r.skew == "replay" for r in self.reproduce)
        if replays and not self.sim.replay_file:
            raise ValueError("skew 'replay' needs sim.replay_file (a routing replay file)")
        roles = [r.role for r in self.reproduce]
        fitted, held_out = roles.count("calibration"), roles.count("validation")
        if self.calibration is not None:
            if not fitted:
                raise ValueError("calibration needs reproduce rows with role = 'calibration'")
            if 3 * fitted > fitted + held_out:
                raise ValueError(
                    f"{fitted} calibration rows of {fitted + held_out}: at most a third of the "
                    "rows may fit the constants; mark more rows role = 'validation'"
                )
        elif fitted or held_out:
            raise ValueError("rows with role calibration or validation need [calibration]")
        if self.sim.baseline not in self.sim.policies:
            raise ValueError(
                f"sim.baseline {self.sim.baseline!r} must be one of sim.policies "
                f"{self.sim.policies}"
            )
        return self


def validate_simulation(
    data: dict[str, Any], source: str, overrides: Sequence[str] = ()
) -> SimulationSpec:
    """The spec in ``data`` validated, each job built and checked against its model and
    devices; a ``SpecError`` naming the field, or the job and its mismatches, otherwise."""
    try:
        spec = SimulationSpec.model_validate(data)
    except ValidationError as exc:
        raise spec_error(source, problems_of(exc, SimulationSpec), overrides) from None
    problems = []
    counts = spec.sim.replay_counts()
    for kind, jobs in (("job", spec.job), ("reproduce", spec.reproduce)):
        for i, job in enumerate(jobs):
            try:
                cfg = job.config()
            except ClusterSimConfigError as exc:
                problems.append(f"{kind}[{i}] ({job.name!r}): {exc}")
                continue
            if counts is not None and counts.shape[-1] != cfg.model.num_experts:
                problems.append(
                    f"{kind}[{i}] ({job.name!r}): sim.replay_file has {counts.shape[-1]} "
                    f"experts per layer, the model {cfg.model.num_experts}"
                )
    if problems:
        raise SpecError(f"{source}: " + "\n".join(problems))
    return spec
