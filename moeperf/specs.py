"""Loading a spec: the file (suites/spec_files.py), ``--set`` overrides, then the spec model
of its suite, found in the suite registry.

``validate_spec`` is the one way in, whatever built the data (``load_spec`` from a file,
the gate's paired blocks, the benchmarks); ``--set key=value`` overrides are applied to
the raw data before validation, so they are checked exactly like the file, and a problem
they cause names the flag (suites/spec_overrides.py). Every check runs before any load is
sent.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel

from moeperf.registry import Suite, find_suite, suite_names
from moeperf.suites import reference_install
from moeperf.suites.errors import SpecError
from moeperf.suites.reference_install import REFERENCE_INSTALL
from moeperf.suites.spec_files import read_spec_file, resolve_spec_path
from moeperf.suites.spec_overrides import apply_overrides, blame

if TYPE_CHECKING:
    from moeperf.suites.accuracy.spec import AccuracySpec
    from moeperf.suites.serving.spec import ServingSpec
    from moeperf.suites.simulation.spec import SimulationSpec
    from moeperf.suites.training.dist_spec import DistTrainingSpec
    from moeperf.suites.training.spec import TrainingSpec

SpecT = TypeVar("SpecT", bound=BaseModel)


@dataclass(frozen=True)
class LoadedSpec:
    """A validated spec and the data it was validated from."""

    # As given (what it extends merged in), overrides applied: what the manifest stores.
    given: dict[str, Any]
    # The suite's spec model (its ``suite`` field names the suite).
    spec: BaseModel
    # The spec file, or what built the data ("calibrate"): named in errors.
    source: str

    @property
    def suite(self) -> str:
        name: str = getattr(self.spec, "suite")  # noqa: B009 (every spec model has one)
        return name

    def of(self, kind: type[SpecT]) -> SpecT:
        """The spec, for code that takes one suite's specs (SpecError for another's)."""
        if not isinstance(self.spec, kind):
            wanted = str(kind.model_fields["suite"].default)  # each spec model's own suite
            article = "an" if wanted[0] in "aeiou" else "a"
            raise SpecError(
                f"{self.source}: suite {self.suite!r}; {article} {wanted} spec is needed"
            )
        return self.spec

    @property
    def serving(self) -> ServingSpec:
        """The spec as a serving spec (SpecError for another suite's)."""
        from moeperf.suites.serving.spec import ServingSpec

        return self.of(ServingSpec)

    @property
    def simulation(self) -> SimulationSpec:
        """The spec as a simulation spec (SpecError for another suite's)."""
        from moeperf.suites.simulation.spec import SimulationSpec

        return self.of(SimulationSpec)

    @property
    def training(self) -> TrainingSpec:
        """The spec as a training spec (SpecError for another suite's)."""
        from moeperf.suites.training.spec import TrainingSpec

        return self.of(TrainingSpec)

    @property
    def training_dist(self) -> DistTrainingSpec:
        """The spec as a training-dist spec (SpecError for another suite's)."""
        from moeperf.suites.training.dist_spec import DistTrainingSpec

        return self.of(DistTrainingSpec)

    @property
    def accuracy(self) -> AccuracySpec:
        """The spec as an accuracy spec (SpecError for another suite's)."""
        from moeperf.suites.accuracy.spec import AccuracySpec

        return self.of(AccuracySpec)


def runnable_suite(name: object, where: str) -> Suite:
    """The entry of a spec's ``suite``; a ``SpecError`` naming the valid ones otherwise."""
    suite = find_suite(name)
    if suite is None or suite.validate is None or suite.run is None:
        valid = ", ".join(suite_names(runnable=True))
        raise SpecError(f"{where}: unknown suite {name!r}; valid suites: {valid}")
    return suite


def load_spec(name_or_path: str, overrides: Sequence[str] = ()) -> LoadedSpec:
    """Read a spec file (or a shipped spec by name), override and validate it."""
    path = resolve_spec_path(name_or_path)
    return validate_spec(read_spec_file(path), str(path), overrides)


def validate_spec(
    data: Mapping[str, Any], source: str, overrides: Sequence[str] = ()
) -> LoadedSpec:
    """``data`` with ``overrides`` applied, validated as the spec of its suite (``suite``,
    "serving" when left out).

    A ``SpecError`` lists every problem, under ``source`` or under the ``--set`` that
    caused it. ``data`` itself is left as it is.
    """
    given = apply_overrides(copy.deepcopy(dict(data)), overrides)
    name = given.get("suite", "serving")
    where = ", ".join(o.shown for o in blame(overrides, [("suite",)])) or source
    suite = runnable_suite(name, where)
    if suite.needs_torch and not reference_install.torch_installed():
        raise SpecError(
            f"{source}: suite {name!r} runs the reference trainer, which needs PyTorch and "
            f"the reference extra; install them with: {REFERENCE_INSTALL}"
        )
    assert suite.validate is not None  # runnable_suite checked it
    return LoadedSpec(given, suite.validate.load()(given, source, overrides), source)
