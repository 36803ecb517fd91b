"""Every suite moeperf runs or stores, registered once.

An entry names, for one value of a spec's ``suite`` field: the function that validates
its spec, the function that runs it, its summary record, what ``moeperf runs show``
prints of it, which HTML report blocks draw it and its gate metrics. Nothing else branches
on a suite's name: spec loading and the CLI (moeperf/specs.py, moeperf/cli.py), the
summary reader (collectors/summary_json.py), the report and the gate's samples ask here.

The registry is a catalogue: each part is named as ``module:attribute`` and imported when
first used, so a command imports only the suite it runs (``moeperf run default`` never
imports torch or the trainer; ``moeperf --help`` imports no suite at all). Since it imports
nothing of ours, every layer may read it (import-linter's lowest layer): the data model
finds a summary type here and the report its blocks, and each loads only parts of its own
layer or below (tests/unit/test_registry.py checks that, imports every part and checks its
signature, so a renamed function fails there, not in a user's run).

Adding a suite: its spec model and ``validate_*``, its run function (spec, given, store,
options), its summary record (collectors, with ``SUITE``), its ``*_lines`` presenter and
its report blocks, each in the suite's own modules; then one ``Suite`` entry in ``SUITES``
below (docs/development/architecture.md).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

# What each entry's parts are. The registry imports nothing of ours, so the records are
# named in words; tests/unit/test_registry.py checks each part's parameters.
# validate(given, source, overrides) -> the suite's spec model (a SpecError lists problems)
SpecValidator = Callable[[dict[str, Any], str, Sequence[str]], Any]
# run(spec, given, store: RunStore, options: RunOptions) -> the run's id
SuiteRunner = Callable[[Any, dict[str, Any], Any, Any], str]
# present(summary, reader: RunReader) -> Presentation (reports/terminal/presentation.py):
# the answer, the --verbose detail and what was not available
Presenter = Callable[[Any, Any], Any]
# report_blocks(run: RunData) -> the charts and tables of the run's report section
BlockMaker = Callable[[Any], list[Any]]
# gate_samples(run: RunData) -> every gate metric's samples (MetricSamples) of a stored run
GateSamples = Callable[[Any], list[Any]]
# the summary record's class (collectors), called with its fields
SummaryType = Callable[..., Any]


@dataclass(frozen=True)
class Lazy(Generic[F]):
    """A function named ``module:attribute``, imported on first use."""

    path: str

    def load(self) -> F:
        module, _, name = self.path.partition(":")
        function: F = getattr(importlib.import_module(module), name)
        return function


@dataclass(frozen=True)
class Suite:
    """One suite: what a command needs of it."""

    name: str
    # The summary record (collectors); its ``SUITE`` is this entry's name, the tag that
    # summary.json is read back by (collectors/summary_json.py).
    summary: Lazy[SummaryType]
    present: Lazy[Presenter]
    report_blocks: Lazy[BlockMaker]
    # None: runs of this suite are not made from a spec (micro: moeperf ingest-benchmark).
    validate: Lazy[SpecValidator] | None = None
    run: Lazy[SuiteRunner] | None = None
    # None: the nightly gate has no metrics of this suite (its runs compare as no metrics).
    gate_samples: Lazy[GateSamples] | None = None
    # Validating and running need PyTorch (found before anything is imported).
    needs_torch: bool = False


_C = "moeperf.collectors"
_S = "moeperf.suites"
_R = "moeperf.reports.suite_blocks"
_G = "moeperf.reports.samples"
_T = "moeperf.reports.terminal"

SUITES: tuple[Suite, ...] = (
    Suite(
        name="serving",
        summary=Lazy(f"{_C}.serving_records:ServingSummary"),
        validate=Lazy(f"{_S}.serving.validate:validate_serving"),
        run=Lazy(f"{_S}.serving.runner:run_suite"),
        present=Lazy(f"{_T}.serving_lines:serving_lines"),
        report_blocks=Lazy("moeperf.reports.serving_blocks:serving_blocks"),
        gate_samples=Lazy(f"{_G}:serving_run_samples"),
    ),
    Suite(
        name="training",
        summary=Lazy(f"{_C}.training_summary:TrainingSummary"),
        validate=Lazy(f"{_S}.training.plan:validate_training"),
        run=Lazy(f"{_S}.training.runner:run_training"),
        present=Lazy(f"{_T}.training_tables:training_lines"),
        report_blocks=Lazy("moeperf.reports.training_blocks:training_blocks"),
        gate_samples=Lazy(f"{_G}:training_run_samples"),
        needs_torch=True,
    ),
    Suite(
        name="training-dist",
        summary=Lazy(f"{_C}.dist_training_summary:DistTrainingSummary"),
        validate=Lazy(f"{_S}.training.dist_spec:validate_training_dist"),
        run=Lazy(f"{_S}.training.dist_runner:run_training_dist"),
        present=Lazy(f"{_T}.dist_training_tables:dist_training_lines"),
        report_blocks=Lazy("moeperf.reports.training_blocks:dist_training_blocks"),
        needs_torch=True,
    ),
    Suite(
        name="accuracy",
        summary=Lazy(f"{_C}.accuracy_records:AccuracySummary"),
        validate=Lazy(f"{_S}.accuracy.spec:validate_accuracy"),
        run=Lazy(f"{_S}.accuracy.run:run_accuracy"),
        present=Lazy(f"{_T}.accuracy_tables:accuracy_lines"),
        report_blocks=Lazy(f"{_R}:accuracy_run_blocks"),
    ),
    Suite(
        name="simulation",
        summary=Lazy(f"{_C}.simulation_summary:SimulationSummary"),
        validate=Lazy(f"{_S}.simulation.spec:validate_simulation"),
        run=Lazy(f"{_S}.simulation.run:run_simulation"),
        present=Lazy(f"{_T}.simulation_tables:simulation_lines"),
        report_blocks=Lazy(f"{_R}:simulation_blocks"),
    ),
    Suite(
        name="micro",
        summary=Lazy(f"{_C}.micro_summary:MicroSummary"),
        present=Lazy(f"{_T}.micro_lines:micro_lines"),
        report_blocks=Lazy(f"{_R}:micro_blocks"),
        gate_samples=Lazy(f"{_G}:micro_run_samples"),
    ),
)

_BY_NAME = {suite.name: suite for suite in SUITES}


def suite_names(*, runnable: bool = False) -> list[str]:
    """The registered suites' names (``runnable``: those a spec may name)."""
    return [s.name for s in SUITES if s.run is not None or not runnable]


def find_suite(name: object) -> Suite | None:
    """The entry of suite ``name``; None for a suite this moeperf does not know."""
    return _BY_NAME.get(name) if isinstance(name, str) else None
