"""summary.json: the one place where a run's summary record becomes JSON and comes back.

A summary is one of the records in ``RunSummary``; the file holds its fields under their
own names (nested records as objects, tuples as lists), plus ``schema_version`` and
``suite``, the tag that says which record it is. Quantiles stay a list of
``{q, value, ci_low, ci_high}``, so the file reads as well with plain ``json``. pydantic
turns the records into JSON values and back (``TypeAdapter``: its field walking and its
type checks); what is ours is the file's layout and the wording of its errors.

Versions: 2 adds the ``suite`` tag (a micro summary always had it) and writes every
scenario of a serving run whole. Version 1 files are still read: their suite is told by
their content, and a scenario holding only what the runner added (a level interrupted
before its first request record) reads as a scenario without requests.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np
from pydantic import TypeAdapter, ValidationError
from pydantic_core import ErrorDetails

from moeperf.collectors.errors import CollectorError
from moeperf.collectors.schema import (
    SUMMARY_SCHEMA_VERSION,
    SUPPORTED_SUMMARY_SCHEMA_VERSIONS,
    check_schema_version,
)
from moeperf.registry import find_suite, suite_names

if TYPE_CHECKING:
    # The records are imported when a file of theirs is read or written, through the suite
    # registry: reading a manifest-only listing imports none of them (moeperf runs list).
    from moeperf.collectors.micro_summary import BenchmarkSummary
    from moeperf.collectors.summary_types import RunSummary

# A benchmark's rounds (a Described) are written inline in its entry, as version 1 did.
_ROUNDS_FIELDS = ("count", "mean", "quantiles")


# A micro summary's benchmarks are written flat, as version 1 wrote them (its file format).
MICRO_SUITE = "micro"


class SummaryFormatError(CollectorError):
    """A summary.json that does not hold the fields of its summary record."""


def summary_to_json(summary: RunSummary) -> dict[str, Any]:
    """The body of summary.json for ``summary``."""
    from moeperf.collectors.micro_summary import MicroSummary

    body = _dump(summary)
    if isinstance(summary, MicroSummary):
        body["benchmarks"] = {name: _flat_benchmark(b) for name, b in summary.benchmarks.items()}
    return {"schema_version": SUMMARY_SCHEMA_VERSION, "suite": summary.SUITE, **body}


def summary_from_json(data: Any, where: str) -> RunSummary:
    """The summary record a summary.json body holds; ``where`` names the file in errors."""
    if not isinstance(data, dict):
        raise SummaryFormatError(f"{where}: not a JSON object")
    check_schema_version(data.get("schema_version"), where, SUPPORTED_SUMMARY_SCHEMA_VERSIONS)
    if data["schema_version"] == 1:
        data = _from_version_1(data)
    suite = data.get("suite")
    # The record is the one the suite registry names for the file's tag.
    entry = find_suite(suite)
    if entry is None:
        known = ", ".join(sorted(suite_names()))
        raise SummaryFormatError(f"{where}: suite {suite!r} is not one of {known}")
    cls = cast("type[RunSummary]", entry.summary.load())
    if suite == MICRO_SUITE and isinstance(data.get("benchmarks"), dict):
        benchmarks = {name: _nested_benchmark(e) for name, e in data["benchmarks"].items()}
        data = {**data, "benchmarks": benchmarks}
    try:
        # Strict, so that "3" is no int and true no number; validated as JSON because
        # strict Python input would have to be record instances and tuples, where JSON
        # input is objects and lists. Keys a later minor version added are left out.
        summary: RunSummary = _adapter(cls).validate_json(json.dumps(data), strict=True)
    except ValidationError as error:
        lines = (_problem(e, where) for e in error.errors(include_url=False))
        raise SummaryFormatError("\n".join(lines)) from None
    return summary


def _from_version_1(data: dict[str, Any]) -> dict[str, Any]:
    from moeperf.collectors.serving_records import ServingSummary, empty_scenario
    from moeperf.collectors.training_summary import TrainingSummary

    if "benchmarks" in data:
        return {**data, "suite": MICRO_SUITE}
    if "peak_flops" in data:
        return {**data, "suite": TrainingSummary.SUITE}
    empty = _dump(empty_scenario())
    scenarios = data.get("scenarios")
    if isinstance(scenarios, dict):
        scenarios = {name: {**empty, **entry} for name, entry in scenarios.items()}
    return {**data, "suite": ServingSummary.SUITE, "scenarios": scenarios}


# --- pydantic's side: records to JSON values and back, its errors in our words -------------


_ADAPTERS: dict[type[Any], TypeAdapter[Any]] = {}


def _adapter(kind: type[Any]) -> TypeAdapter[Any]:
    """pydantic's adapter for a record type, built on first use and kept."""
    if kind not in _ADAPTERS:
        _ADAPTERS[kind] = TypeAdapter(kind)
    return _ADAPTERS[kind]


def _dump(record: Any) -> dict[str, Any]:
    # A numpy scalar in an int field is expected (the fallback converts it): no warning.
    body: dict[str, Any] = _adapter(type(record)).dump_python(
        record, fallback=_plain, warnings=False
    )
    return body


def _plain(value: Any) -> Any:
    """A numpy scalar that reached a record, as the Python number it holds."""
    return value.item() if isinstance(value, np.generic) else value


def _flat_benchmark(summary: BenchmarkSummary) -> dict[str, Any]:
    """A benchmark as version 1 wrote it: its rounds' description inline, with the
    median and p90 beside min and max for readers of the plain file."""
    return {
        "scenario": summary.scenario,
        "unit": summary.unit,
        "direction": summary.direction,
        "iterations": summary.iterations,
        "median": summary.median,
        "p90": summary.p90,
        "min": summary.min,
        "max": summary.max,
        **_dump(summary.rounds),
    }


def _nested_benchmark(entry: Any) -> Any:
    """A flat benchmark entry with its rounds' fields gathered as the record has them."""
    if not isinstance(entry, dict):
        return entry
    return {**entry, "rounds": {k: entry[k] for k in _ROUNDS_FIELDS if k in entry}}


def _problem(error: ErrorDetails, where: str) -> str:
    """One of pydantic's errors as ``<file>.<field path>: what is wrong``."""
    loc, kind = error["loc"], error["type"]
    if kind == "missing":
        return f"{_path(where, loc[:-1])}: no {loc[-1]!r}"
    if kind.endswith("_type"):  # int_type, dict_type, dataclass_type (class_name), ...
        expected = error.get("ctx", {}).get("class_name") or kind.removesuffix("_type")
        return f"{_path(where, loc)}: {error['input']!r} is not of type {expected}"
    return f"{_path(where, loc)}: {error['msg']} (got {error['input']!r})"


def _path(where: str, loc: Sequence[int | str]) -> str:
    return where + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc)
