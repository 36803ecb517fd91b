"""The scenarios of a training spec: one ``TrainerConfig`` per policy x skew (x size).

A scenario is named ``<policy>/<skew>`` or ``<policy>/<skew>/<size>``; that name is the
``scenario`` of its step records. ``check_runnable`` puts every scenario through the
trainer's own checks before anything runs, so a wrong name, an unreadable replay file or
a budget below the static memory is a spec error (exit 2), not a crash mid-run.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from moeperf.suites.errors import SpecError
from moeperf.suites.spec_errors import problems_of, spec_error
from moeperf.suites.training.spec import TrainingSpec, model_config
from moeperf.targets.model.checkpoint import ModelDirError
from moeperf.targets.model.config import MoEConfig
from moeperf.targets.model.model import MoETransformer
from moeperf.targets.training.memory import training_static_bytes
from moeperf.targets.training.setup import TrainerConfig, TrainingConfigError, build
from moeperf.targets.training.skew import SkewProfileError, profile_by_name
from moeperf.targets.training.trainer import Trainer

DEFAULT_CHECKPOINT_DIR = "checkpoints"  # placeholder until the runner puts it in the run
# A setup the spec got wrong may show only when it is built: still the user's to fix.
CONFIG_ERRORS = (TrainingConfigError, SkewProfileError, ModelDirError)


@dataclass(frozen=True)
class Scenario:
    name: str
    policy: str
    skew: str
    size: str  # "" when the matrix has no sizes
    config: TrainerConfig  # budget_bytes is None until a budget_ratio is resolved


def scenario_name(policy: str, skew: str, size: str = "") -> str:
    return f"{policy}/{skew}" + (f"/{size}" if size else "")


def _trainer_fields(spec: TrainingSpec) -> dict:
    t = spec.trainer
    names = {f.name for f in dataclasses.fields(TrainerConfig)}
    fields = {k: v for k, v in t.model_dump(exclude={"model"}).items() if k in names}
    fields["init_from"] = t.init_dir
    fields["checkpoint_dir"] = t.checkpoint_dir or DEFAULT_CHECKPOINT_DIR
    return fields


def sizes(spec: TrainingSpec) -> dict[str, MoEConfig]:
    """Model configs by size name ("" alone when the matrix has no sizes)."""
    if not spec.matrix.sizes:
        return {"": model_config(spec.trainer)}
    return {s.name: model_config(spec.trainer, s.overrides()) for s in spec.matrix.sizes}


def scenarios(spec: TrainingSpec) -> list[Scenario]:
    fields = _trainer_fields(spec)
    found = []
    for size, model in sizes(spec).items():
        for policy in spec.matrix.policies:
            for skew in spec.matrix.skews:
                replay = fields["replay_path"] if skew == "replay" else None
                config = TrainerConfig(
                    **{
                        **fields,
                        "model": model,
                        "policy": policy,
                        "skew": skew,
                        "replay_path": replay,
                    }
                )
                name = scenario_name(policy, skew, size)
                found.append(Scenario(name, policy, skew, size, config))
    return found


def static_bytes(model: MoEConfig) -> int:
    """Weights, gradients and AdamW state of ``model`` in float32 (the trainer's check)."""
    return training_static_bytes(MoETransformer(model)).total_bytes


def check_runnable(spec: TrainingSpec, source: str) -> None:
    """Every scenario through the trainer's checks; a ``SpecError`` naming them otherwise."""
    failing: dict[str, list[str]] = {}  # message -> the scenarios it is about
    for scenario in scenarios(spec):
        config = scenario.config
        try:
            config.validate()
            profile_by_name(config.skew, config.skew_seed, config.replay_path, config.model)
        except CONFIG_ERRORS as exc:
            failing.setdefault(str(exc), []).append(scenario.name)
    problems = [f"  scenario {', '.join(names)}: {message}" for message, names in failing.items()]
    if spec.trainer.budget_bytes is not None:
        bytes_per_element = 2 if spec.trainer.dtype == "bfloat16" else 4
        for size, model in sizes(spec).items():
            static = static_bytes(model) * bytes_per_element // 4
            if spec.trainer.budget_bytes <= static:
                where = f" (size {size})" if size else ""
                problems.append(
                    f"  trainer.budget_bytes: {spec.trainer.budget_bytes:,} is smaller than the "
                    f"weights, gradients and optimizer state alone{where} ({static:,} bytes); "
                    "give at least that plus activations, or a budget_ratio"
                )
    if problems:
        raise SpecError("\n".join([f"{source}: invalid spec", *problems]))


def build_trainer(config: TrainerConfig, what: str) -> tuple[Trainer, float]:
    """A trainer for ``config`` and the seconds building it took; a ``SpecError`` naming
    ``what`` for a configuration the trainer refuses (exit 2)."""
    started = time.perf_counter()
    try:
        trainer = Trainer(build(config))
    except CONFIG_ERRORS as exc:
        raise SpecError(f"{what}: {exc}") from None
    return trainer, time.perf_counter() - started


def validate_training(
    data: dict[str, Any], source: str, overrides: Sequence[str] = ()
) -> TrainingSpec:
    """The spec in ``data`` validated (pydantic, then every scenario by the trainer's own
    checks); a ``SpecError`` naming the field (or the ``overrides`` entry) otherwise."""
    try:
        spec = TrainingSpec.model_validate(data)
    except ValidationError as exc:
        raise spec_error(source, problems_of(exc, TrainingSpec), overrides) from None
    check_runnable(spec, source)
    return spec
