"""A run's record files as tables: JSONL appended while it runs, parquet once it ends,
read back as pandas frames. pandas and pyarrow are imported here only, so commands that
read only manifests (``moeperf runs list``) start without them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from moeperf.collectors.accel_records import DeviceSample
from moeperf.collectors.run_json import damaged, iter_jsonl
from moeperf.collectors.schema import SCHEMA_VERSION, check_schema_version
from moeperf.collectors.soak_records import MemorySample
from moeperf.collectors.tables import (
    ACCELERATOR_SCHEMA,
    REQUEST_SCHEMA,
    SCHEMAS,
    read_parquet_frame,
    rows_to_table,
    table_to_frame,
)

RECORD_FILES = {
    "requests": "requests",
    "steps": "steps",
    "samples": "samples",
    "memory": "memory",  # a soak's MemorySamples of the target
    "accelerator": "accelerator",  # DeviceSamples (collectors.sources.accel_sampler)
    "harness_errors": "harness_errors",  # HarnessErrors (against the synthetic target)
}
# Tables whose rows may be amended by appending a newer row with the same key.
_AMENDABLE_KEYS = {"requests": "request_id"}


# Rows parsed into dicts at once while a JSONL file becomes a table: the dicts of a
# batch are ~10x the size of its Arrow columns, so a long run's file is read in batches.
_BATCH_ROWS = 2_000


def _latest_table(kind: str, table: pa.Table) -> pa.Table:
    """The last row per key, in the order keys first appeared (amended records)."""
    key = _AMENDABLE_KEYS.get(kind)
    if key is None or table.num_rows == 0:
        return table
    codes, uniques = pd.factorize(table.column(key).to_numpy(zero_copy_only=False))
    if len(uniques) == table.num_rows:
        return table  # nothing amended
    last = np.full(len(uniques), -1, dtype=np.int64)
    np.maximum.at(last, codes, np.arange(table.num_rows, dtype=np.int64))
    return table.take(last)


def _jsonl_table(kind: str, path: Path) -> pa.Table:
    """A JSONL record file as one Arrow table, the latest row per key, parsed in batches."""
    batches = []
    rows: list[dict[str, Any]] = []
    for row in iter_jsonl(path):
        rows.append(row)
        if len(rows) == _BATCH_ROWS:
            batches.append(rows_to_table(kind, rows))
            rows = []
    if rows:
        batches.append(rows_to_table(kind, rows))
    if not batches:
        return SCHEMAS[kind].empty_table()
    return _latest_table(kind, pa.concat_tables(batches))


def jsonl_to_parquet(directory: Path, kind: str, name: str) -> None:
    source = directory / f"{name}.jsonl"
    if not source.exists():
        return
    table = _jsonl_table(kind, source)
    target = directory / f"{name}.parquet"
    tmp = target.with_suffix(".parquet.tmp")
    table = table.replace_schema_metadata({"moeperf_schema_version": str(SCHEMA_VERSION)})
    pq.write_table(table, tmp)
    os.replace(tmp, target)
    # One copy of the data: the JSONL was only the crash-safe form.
    source.unlink()


def requests_frame(directory: Path) -> pd.DataFrame:
    """Every request appended to a running run so far (the latest version of each)."""
    path = directory / "requests.jsonl"
    table = _jsonl_table("requests", path) if path.exists() else REQUEST_SCHEMA.empty_table()
    return table_to_frame("requests", table, consume=True)


def read_frame(directory: Path, kind: str) -> pd.DataFrame:
    """One kind of record of a run directory as a frame: its parquet once the run ended,
    else its JSONL (the latest row per key), else an empty frame of the kind's schema."""
    name = RECORD_FILES[kind]
    parquet = directory / f"{name}.parquet"
    if parquet.exists():
        try:
            meta = pq.read_schema(parquet).metadata or {}
        except (pa.ArrowException, OSError) as exc:
            raise damaged(parquet, f"not a readable parquet file ({exc})") from None
        found = meta.get(b"moeperf_schema_version", b"")
        check_schema_version(int(found) if found.isdigit() else found, str(parquet))
        try:
            return read_parquet_frame(kind, parquet)
        except (pa.ArrowException, OSError, KeyError, ValueError) as exc:
            raise damaged(parquet, f"its {kind} cannot be read ({exc!r})") from None
    jsonl = directory / f"{name}.jsonl"
    table = _jsonl_table(kind, jsonl) if jsonl.exists() else SCHEMAS[kind].empty_table()
    return table_to_frame(kind, table, consume=True)


def memory_samples(directory: Path) -> list[MemorySample]:
    """A soak's samples of the target's resident memory, in the order taken."""
    frame = read_frame(directory, "memory")
    return [
        MemorySample(
            t_ns=int(row["t_ns"]),
            rss_bytes=int(row["rss_bytes"]),
            processes=int(row["processes"]),
            pid=int(row["pid"]),
            scenario=str(row["scenario"]),
        )
        for row in frame.to_dict("records")
    ]


def accelerator_samples(directory: Path) -> list[DeviceSample]:
    """The accelerator sampler's readings, in the order taken (nulls back to None)."""
    frame = read_frame(directory, "accelerator")
    table = pa.Table.from_pandas(frame, schema=ACCELERATOR_SCHEMA, preserve_index=False)
    samples = []
    for row in table.to_pylist():
        reasons = row.pop("throttle_reasons")
        samples.append(
            DeviceSample(**row, throttle_reasons=None if reasons is None else tuple(reasons))
        )
    return samples
