"""A serving spec validated: the model's own checks, then what needs the target's or the
planner's code (the reference target's config, a [plan]'s deployment)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from moeperf.suites.serving.mode_spec import DeploySweepSpec
from moeperf.suites.serving.spec import ServingSpec
from moeperf.suites.serving.target_spec import reference_config
from moeperf.suites.spec_errors import Problem, problems_of, spec_error, unknown_field


def validate_serving(
    given: dict[str, Any], source: str, overrides: Sequence[str] = ()
) -> ServingSpec:
    """``given`` (overrides already applied) as a ``ServingSpec``; a ``SpecError`` lists every
    problem, under ``source`` or under the ``--set`` that caused it."""
    try:
        spec = ServingSpec.model_validate(given)
    except ValidationError as exc:
        raise spec_error(source, problems_of(exc, ServingSpec), overrides) from None
    if spec.target.kind == "reference":
        reference_config(spec.target.reference, source, overrides)
        if spec.deploy_sweep is not None:  # every arm's knobs, before any arm starts
            levels = spec.load.levels if spec.deploy_sweep.linked else spec.load.levels[:1]
            _check_arms(spec.deploy_sweep, spec.target.reference, levels, source, overrides)
    if spec.plan is not None:
        from moeperf.suites.serving.sweep_plan import resolve_plan  # needs the planner: only here

        resolve_plan(spec, source)  # a config or deployment it cannot use: exit 2 now
        if spec.deploy_sweep is not None:
            _check_plan_fields(spec.deploy_sweep, source, overrides)
    return spec


def _check_plan_fields(sweep: DeploySweepSpec, source: str, overrides: Sequence[str]) -> None:
    """deploy_sweep.plan_fields naming a deployment field there is not: a ``SpecError``."""
    from moeperf.suites.serving.deploy_sweep.plan_check import SETTABLE

    wrong = [
        Problem(
            f"deploy_sweep.plan_fields.{knob}",
            (("deploy_sweep", "plan_fields", knob),),
            f"{field!r} is not a deployment field an arm can set; valid: {', '.join(SETTABLE)}",
        )
        for knob, field in sweep.plan_fields.items()
        if field not in SETTABLE
    ]
    if wrong:
        raise spec_error(source, wrong, overrides)


def _check_arms(
    sweep: DeploySweepSpec,
    base: dict[str, Any],
    levels: Sequence[float],
    source: str,
    overrides: Sequence[str],
) -> None:
    """A grid knob the reference target does not have, or an arm's config it refuses: a
    ``SpecError`` naming the knob under deploy_sweep.grid (the base config passed already,
    so the target's config class imports)."""
    from moeperf.targets.serving.config import ReferenceTargetConfig

    valid = list(ReferenceTargetConfig.model_fields)
    named = [("grid", knob) for knob in sweep.grid] + [("linked", knob) for knob in sweep.linked]
    unknown = [
        unknown_field(("deploy_sweep", table, knob), valid)
        for table, knob in named
        if knob not in valid
    ]
    if unknown:
        raise spec_error(source, unknown, overrides)
    for knobs in sweep.arm_knobs():
        for level in levels:
            linked = {knob: int(level) for knob in sweep.linked}
            reference_config({**base, **knobs, **linked}, source, overrides)
