"""reference/records.md: a run's record tables (their columns) and each suite's summary.

Columns come from the Arrow schemas the readers use (collectors/tables.py), described by
the comments of the record classes that write them; summaries from each suite's summary
record (the registry names it) and the records nested in it, each documented once.
"""

from __future__ import annotations

import typing
from typing import Any

from moeperf.collectors.accel_records import DeviceSample
from moeperf.collectors.harness_errors import HarnessError
from moeperf.collectors.records import RequestRecord, SampleRecord, StepRecord
from moeperf.collectors.soak_records import MemorySample
from moeperf.collectors.tables import SCHEMAS
from moeperf.docs.field_comments import field_comments
from moeperf.docs.fields import fields_of, nested_table
from moeperf.docs.markdown import GENERATED, code, paragraphs, table
from moeperf.docs.type_text import type_text
from moeperf.docs.units import unit_of
from moeperf.registry import SUITES

# Which record class writes each table (its field comments describe the columns).
WRITERS: dict[str, type] = {
    "requests": RequestRecord,
    "steps": StepRecord,
    "samples": SampleRecord,
    "memory": MemorySample,
    "accelerator": DeviceSample,
    "harness_errors": HarnessError,
}


def page() -> str:
    missing = SCHEMAS.keys() - WRITERS.keys()
    assert not missing, f"record tables without a writer named here: {sorted(missing)}"
    parts = [
        "# Records and summaries\n\n", GENERATED,
        "\nA run is a directory (`runs/<run_id>/`): `manifest.json` (what ran, on what), "
        "record tables (`requests`, `steps`, `samples`, `memory`, `accelerator`, "
        "`harness_errors`; JSONL "
        "while the run goes, parquet after) and `summary.json` (the suite's summary record). "
        "Read a table with `moeperf.collectors.store.RunStore(\"runs\").open(RUN)` "
        "(`.requests()`, `.steps()`, ...: pandas DataFrames) or with pandas directly.\n",
        "\n## Record tables\n",
    ]  # fmt: skip
    for kind, schema in SCHEMAS.items():
        writer = WRITERS[kind]
        comments = field_comments(writer)
        rows = [
            (code(f.name), str(f.type), unit_of(f.name), comments.get(f.name, "")) for f in schema
        ]
        parts.append(f"\n### `{kind}` {{#table-{kind}}}\n\n")
        parts.append(f"Written by `{writer.__module__.removeprefix('moeperf.')}."
                     f"{writer.__name__}`. " + paragraphs(writer.__doc__))  # fmt: skip
        parts.append("\n" + table(("column", "Arrow type", "unit", "description"), rows))
    parts.append("\n## Summaries\n\nEach suite's `summary.json` holds one record; its "
                 "`suite` field says which.\n")  # fmt: skip
    seen: set[type] = set()
    for suite in SUITES:
        summary = typing.cast(type, suite.summary.load())  # a record class
        parts.append(f"\n### `{suite.name}`: `{summary.__name__}` {{#summary-{suite.name}}}\n")
        parts += _record(summary, seen, level=4)
    return "".join(parts)


def _record(cls: type, seen: set[type], level: int) -> list[str]:
    """``cls``'s fields, then each record nested in it not documented yet."""
    if cls in seen:
        return [f"\n`{cls.__name__}`: see above.\n"]
    seen.add(cls)
    comments = field_comments(cls)
    rows = [
        (code(f.name), type_text(f.annotation), unit_of(f.name), comments.get(f.name, ""))
        for f in fields_of(cls)
    ]
    parts = ["\n" + paragraphs(cls.__doc__), "\n" + table(("field", "type", "unit",
                                                         "description"), rows)]  # fmt: skip
    for nested in _nested(cls):
        if nested not in seen:
            parts.append(f"\n{'#' * level} `{nested.__name__}` {{#record-{nested.__name__}}}\n")
            parts += _record(nested, seen, min(level + 1, 6))
    return parts


def _nested(cls: type) -> list[type]:
    found: list[type] = []
    for f in fields_of(cls):
        for annotation in _parts(f.annotation):
            inner = nested_table(annotation)
            if inner is not None and inner[0] not in found:
                found.append(inner[0])
    return found


def _parts(annotation: Any) -> list[Any]:
    """The annotation and, for a dict, its value type (summaries map names to records)."""
    if typing.get_origin(annotation) is dict:
        return [typing.get_args(annotation)[1]]
    return [annotation]
