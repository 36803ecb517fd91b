"""summary.json: the one place where a run's summary record becomes JSON and comes back.

A summary is one of the records in ``RunSummary``; the file holds its fields under their
own names (nested records as objects, tuples as lists), plus ``schema_version`` and
``suite``, the tag that says which record it is. Quantiles stay a list of
``{q, value, ci_low, ci_high}``, so the file reads as well with plain ``json``.

Versions: 2 adds the ``suite`` tag (a micro summary always had it) and writes every
scenario of a serving run whole. Version 1 files are still read: their suite is told by
their content, and a scenario holding only what the runner added (a level interrupted
before its first request record) reads as a scenario without requests.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, TypeVar

import numpy as np

from collectors.errors import CollectorError
from collectors.micro_summary import BenchmarkSummary, MicroSummary
from collectors.schema import (
    SUMMARY_SCHEMA_VERSION,
    SUPPORTED_SUMMARY_SCHEMA_VERSIONS,
    check_schema_version,
)
from collectors.serving_records import ServingSummary, empty_scenario
from collectors.training_summary import TrainingSummary

RunSummary = ServingSummary | TrainingSummary | MicroSummary
_BY_SUITE: dict[str, type[RunSummary]] = {
    cls.SUITE: cls for cls in (ServingSummary, TrainingSummary, MicroSummary)
}
_T = TypeVar("_T")


class SummaryFormatError(CollectorError):
    """A summary.json that does not hold the fields of its summary record."""


def summary_to_json(summary: RunSummary) -> dict[str, Any]:
    """The body of summary.json for ``summary``."""
    body = _encode(summary)
    assert isinstance(body, dict)
    return {"schema_version": SUMMARY_SCHEMA_VERSION, "suite": summary.SUITE, **body}


def summary_from_json(data: Any, where: str) -> RunSummary:
    """The summary record a summary.json body holds; ``where`` names the file in errors."""
    if not isinstance(data, dict):
        raise SummaryFormatError(f"{where}: not a JSON object")
    check_schema_version(data.get("schema_version"), where, SUPPORTED_SUMMARY_SCHEMA_VERSIONS)
    if data["schema_version"] == 1:
        data = _from_version_1(data)
    suite = data.get("suite")
    cls = _BY_SUITE.get(suite) if isinstance(suite, str) else None
    if cls is None:
        known = ", ".join(sorted(_BY_SUITE))
        raise SummaryFormatError(f"{where}: suite {suite!r} is not one of {known}")
    return _decode(cls, data, where)


def _from_version_1(data: dict[str, Any]) -> dict[str, Any]:
    if "benchmarks" in data:
        return {**data, "suite": MicroSummary.SUITE}
    if "peak_flops" in data:
        return {**data, "suite": TrainingSummary.SUITE}
    empty = _encode(empty_scenario())
    assert isinstance(empty, dict)
    scenarios = data.get("scenarios")
    if isinstance(scenarios, dict):
        scenarios = {name: {**empty, **entry} for name, entry in scenarios.items()}
    return {**data, "suite": ServingSummary.SUITE, "scenarios": scenarios}


# --- records to JSON values and back ---------------------------------------------------


def _encode(value: Any) -> Any:
    if isinstance(value, BenchmarkSummary):
        return _flat_benchmark(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _encode(v) for k, v in value.items()}
    if isinstance(value, np.generic):  # a numpy scalar that reached a record
        return value.item()
    return value


def _flat_benchmark(summary: BenchmarkSummary) -> dict[str, Any]:
    """A benchmark as version 1 wrote it: its rounds' description inline, with the
    median and p90 beside min and max for readers of the plain file."""
    rounds = _encode(summary.rounds)
    return {
        "scenario": summary.scenario,
        "unit": summary.unit,
        "direction": summary.direction,
        "iterations": summary.iterations,
        "median": summary.median,
        "p90": summary.p90,
        "min": summary.min,
        "max": summary.max,
        **rounds,
    }


def _decode(kind: Any, data: Any, where: str) -> Any:
    if kind is Any:
        return data
    if kind is BenchmarkSummary and isinstance(data, dict):
        rounds = {k: data.get(k) for k in ("count", "mean", "quantiles")}
        return _decode_record(BenchmarkSummary, {**data, "rounds": rounds}, where)
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        return _decode_record(kind, data, where)
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (types.UnionType, typing.Union):
        if data is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _decode(inner, data, where)
    if origin is tuple and isinstance(data, list):
        return tuple(_decode(args[0], v, f"{where}[{i}]") for i, v in enumerate(data))
    if origin is dict and isinstance(data, dict):
        return {k: _decode(args[1], v, f"{where}.{k}") for k, v in data.items()}
    if kind is float and isinstance(data, int | float) and not isinstance(data, bool):
        return float(data)
    if kind in (int, str, bool) and type(data) is kind:
        return data
    raise SummaryFormatError(f"{where}: {data!r} is not of type {_name(kind)}")


def _decode_record(cls: type[_T], data: Any, where: str) -> _T:
    if not isinstance(data, dict):
        raise SummaryFormatError(f"{where}: {data!r} is not an object ({cls.__name__})")
    hints = typing.get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]  # cls is a dataclass
        if f.name in data:
            values[f.name] = _decode(hints[f.name], data[f.name], f"{where}.{f.name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise SummaryFormatError(f"{where}: no {f.name!r} ({cls.__name__})")
    # Keys a later minor version added are left out rather than refused.
    return cls(**values)


def _name(kind: Any) -> str:
    return getattr(kind, "__name__", None) or str(kind)
