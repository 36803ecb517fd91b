"""The suite registry (moeperf/registry.py): every shipped spec's suite is registered, every
registered suite has a summary type, a presenter and report blocks, every part it names
imports and takes the parameters its callers pass, and each part lives in a layer that the
callers reading it may import."""

from __future__ import annotations

import inspect

import pytest

from moeperf.collectors.summary_json import summary_from_json, summary_to_json
from moeperf.registry import SUITES, Lazy, find_suite, suite_names
from moeperf.specs import runnable_suite
from moeperf.suites.errors import SpecError
from moeperf.suites.spec_files import SPEC_DIR, read_spec_file, resolve_spec_path

# The parameter count of each part, as its caller passes them (moeperf/registry.py).
ARITY = {"validate": 3, "run": 4, "present": 2, "report_blocks": 1, "gate_samples": 1}
# Who loads each part, and so the layer its module must be in or below.
LAYER = {
    "summary": ("moeperf.collectors.",),  # read by the data model (summary_json)
    "report_blocks": ("moeperf.reports.",),  # read by the report
    "gate_samples": ("moeperf.reports.",),  # read by the gate's samples
    "validate": ("moeperf.suites.",),  # read by moeperf.specs (top): any layer works
    "run": ("moeperf.suites.",),
    "present": ("moeperf.reports.terminal.",),  # read by the CLI: terminal presentation
}


def _parts(suite):
    for field in ("summary", "validate", "run", "present", "report_blocks", "gate_samples"):
        part = getattr(suite, field)
        if part is not None:
            yield field, part


def test_names_are_unique_and_found():
    names = [suite.name for suite in SUITES]
    assert len(names) == len(set(names))
    assert suite_names() == names
    for name in names:
        assert find_suite(name) is not None
    assert find_suite("nope") is None and find_suite(None) is None


def test_every_shipped_spec_names_a_registered_runnable_suite():
    paths = sorted(SPEC_DIR.glob("*.toml"))
    assert len(paths) > 20
    runnable = set(suite_names(runnable=True))
    for path in paths:
        suite = read_spec_file(path).get("suite", "serving")
        assert suite in runnable, path.name


def test_every_suite_has_a_summary_a_presenter_and_report_blocks():
    for suite in SUITES:
        summary = suite.summary.load()
        assert getattr(summary, "SUITE") == suite.name  # noqa: B009
        assert suite.present.load() is not None
        assert suite.report_blocks.load() is not None
        # A runnable suite both validates and runs; one stored by another command neither.
        assert (suite.validate is None) == (suite.run is None)


@pytest.mark.parametrize("suite", SUITES, ids=lambda s: s.name)
def test_every_part_imports_with_its_callers_parameters(suite):
    if suite.needs_torch:
        pytest.importorskip("torch")
    for field, part in _parts(suite):
        function = part.load()
        assert callable(function), (suite.name, field)
        assert part.path.startswith(LAYER[field]), (suite.name, field, part.path)
        if field == "summary":
            continue
        parameters = inspect.signature(function).parameters.values()
        required = [p for p in parameters if p.default is inspect.Parameter.empty]
        positional = [p for p in parameters if p.kind is not inspect.Parameter.KEYWORD_ONLY]
        assert len(required) <= ARITY[field] <= len(positional), (suite.name, field)


def test_a_summary_round_trips_by_the_tag_the_registry_names():
    from moeperf.collectors.serving_records import ServingSummary

    body = summary_to_json(ServingSummary())
    assert body["suite"] == "serving"
    assert isinstance(summary_from_json(body, "summary.json"), ServingSummary)
    with pytest.raises(Exception, match="suite 'nope' is not one of accuracy, micro"):
        summary_from_json({**body, "suite": "nope"}, "summary.json")


def test_an_unknown_suite_names_the_valid_ones():
    with pytest.raises(SpecError, match="unknown suite 'nope'; valid suites: serving, training"):
        runnable_suite("nope", "spec.toml")
    # micro is registered (its runs are stored by ingest-benchmark) but no spec runs it
    with pytest.raises(SpecError, match="unknown suite 'micro'"):
        runnable_suite("micro", "spec.toml")


def test_a_lazy_part_names_a_module_and_an_attribute():
    assert Lazy("moeperf.suites.spec_files:resolve_spec_path").load() is resolve_spec_path
    with pytest.raises(ModuleNotFoundError):
        Lazy("moeperf.nope:x").load()
