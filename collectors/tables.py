"""Arrow schemas of the record tables, shared by the JSONL and the parquet readers.

Both readers go through one Arrow table so that a run read back before and after its
parquet conversion gives the same DataFrame (same dtypes, lists as arrays).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

_INT = pa.int64()
_STR = pa.string()


def _schema(columns: list[tuple[str, pa.DataType]]) -> pa.Schema:
    # The typed parameter gives the column list its element type (a bare list literal of
    # different DataType subclasses would be list[tuple[str, object]] to a type checker).
    return pa.schema(columns)


REQUEST_SCHEMA = _schema(
    [
        ("request_id", _STR),
        ("scenario", _STR),
        ("phase", _STR),
        ("worker", _INT),
        ("intended_send_ns", _INT),
        ("send_ns", _INT),
        ("done_ns", _INT),
        ("status", _STR),
        ("chunk_ns", pa.list_(_INT)),
        # Tokens per chunk fit 32 bits; halving this column matters at 60M chunks.
        ("chunk_tokens", pa.list_(pa.int32())),
        ("chunk_tokens_source", _STR),
        ("first_token_ns", _INT),
        ("last_token_ns", _INT),
        ("prompt_tokens", _INT),
        ("output_tokens", _INT),
        ("client_prompt_tokens", _INT),
        ("client_output_tokens", _INT),
        ("error_type", _STR),
        ("error_message", _STR),
        ("http_status", _INT),
        ("server_request_id", _STR),
        # Added after schema version 1 shipped (_ADDED_COLUMNS): older runs read nulls.
        ("stream_end", _STR),
        ("conversation", _STR),
        ("turn", _INT),
        ("cached_prompt_tokens", _INT),
        ("schema_version", _INT),
    ]
)

STEP_SCHEMA = _schema(
    [
        ("step", _INT),
        ("rank", _INT),
        ("start_ns", _INT),
        ("end_ns", _INT),
        ("tokens", _INT),
        ("scenario", _STR),
        ("microbatch", _INT),
        ("loss", pa.float64()),
        ("model_flops", pa.float64()),
        ("mfu", pa.float64()),
        ("peak_memory_bytes", _INT),
        ("tokens_per_expert", pa.list_(pa.list_(_INT))),
        # Free-form structures kept as JSON text: their keys belong to the trainer.
        ("policy_decisions", _STR),
        ("events", _STR),
        ("simulated", pa.bool_()),
        ("stage", _INT),
        ("attempt", _INT),
        ("compute_s", pa.float64()),
        ("all_to_all_s", pa.float64()),
        ("pipeline_s", pa.float64()),
        ("all_reduce_s", pa.float64()),
        ("wait_s", pa.float64()),
        ("microbatch_s", pa.float64()),
        ("all_to_all_bytes", _INT),
        ("pipeline_bytes", _INT),
        ("all_reduce_bytes", _INT),
        ("layers", pa.list_(_INT)),
        ("tokens_per_local_expert", pa.list_(pa.list_(_INT))),
        ("dispatched_tokens", pa.list_(_INT)),
        ("received_tokens", pa.list_(_INT)),
        ("schema_version", _INT),
    ]
)

SAMPLE_SCHEMA = _schema(
    [
        ("metric", _STR),
        ("value", pa.float64()),
        ("unit", _STR),
        ("direction", _STR),
        ("scenario", _STR),
        ("schema_version", _INT),
    ]
)

# A soak's samples of the target's resident memory (collectors.soak_records.MemorySample).
MEMORY_SCHEMA = _schema(
    [
        ("t_ns", _INT),
        ("rss_bytes", _INT),
        ("processes", _INT),
        ("pid", _INT),
        ("scenario", _STR),
        ("schema_version", _INT),
    ]
)

# The harness's error per request against the synthetic target's own stamps
# (collectors.harness_errors.HarnessError).
HARNESS_ERROR_SCHEMA = _schema(
    [
        ("request_id", _STR),
        ("scenario", _STR),
        ("send_s", pa.float64()),
        ("receive_s", pa.float64()),
        ("ttft_total_s", pa.float64()),
        ("e2e_total_s", pa.float64()),
        ("schema_version", _INT),
    ]
)

# Accelerator telemetry (collectors.accel_records.DeviceSample); nullable wherever a source
# cannot read a field.
ACCELERATOR_SCHEMA = _schema(
    [
        ("t_ns", _INT),
        ("source", _STR),
        ("device", _STR),
        ("name", _STR),
        ("host", _STR),
        ("utilization_ratio", pa.float64()),
        ("memory_used_bytes", _INT),
        ("memory_total_bytes", _INT),
        ("power_w", pa.float64()),
        ("energy_j", pa.float64()),
        ("sm_clock_hz", _INT),
        ("memory_clock_hz", _INT),
        ("temperature_c", pa.float64()),
        ("throttle_reasons", pa.list_(_STR)),
        ("cpu_ratio", pa.float64()),
        ("rss_bytes", _INT),
        ("scenario", _STR),
        ("uuid", _STR),
        ("engine_active_ratio", pa.float64()),
        ("schema_version", _INT),
    ]
)

# The distributed trainer's columns (collectors.records.StepRecord), added later too.
_DIST_STEP_COLUMNS = (
    "stage", "attempt", "compute_s", "all_to_all_s", "pipeline_s", "all_reduce_s", "wait_s",
    "microbatch_s", "all_to_all_bytes", "pipeline_bytes", "all_reduce_bytes", "layers",
    "tokens_per_local_expert", "dispatched_tokens", "received_tokens",
)  # fmt: skip
_JSON_COLUMNS = {"steps": ("policy_decisions", "events")}
# Optional columns added after schema version 1 shipped: older files lack them.
_ADDED_COLUMNS: dict[str, tuple[str, ...]] = {
    "requests": ("stream_end", "conversation", "turn", "cached_prompt_tokens"),
    "steps": ("simulated", *_DIST_STEP_COLUMNS),
}
SCHEMAS = {
    "requests": REQUEST_SCHEMA,
    "steps": STEP_SCHEMA,
    "samples": SAMPLE_SCHEMA,
    "memory": MEMORY_SCHEMA,
    "accelerator": ACCELERATOR_SCHEMA,
    "harness_errors": HARNESS_ERROR_SCHEMA,
}


def rows_to_table(kind: str, rows: list[dict[str, Any]]) -> pa.Table:
    """Build the Arrow table of ``kind`` (a key of ``SCHEMAS``) from record dicts."""
    json_columns = _JSON_COLUMNS.get(kind, ())
    if json_columns:
        rows = [{**r, **{c: json.dumps(r.get(c, [])) for c in json_columns}} for r in rows]
    return pa.Table.from_pylist(rows, schema=SCHEMAS[kind])


def list_column_lengths(column: pd.Series) -> np.ndarray:
    """Length of every list in a list column (0 for a missing one). Arrow-backed columns
    (pd.ArrowDtype) are read without a Python step per row."""
    if isinstance(column.dtype, pd.ArrowDtype):
        lengths = pc.list_value_length(column.array._pa_array).fill_null(0)
        return lengths.to_numpy(zero_copy_only=False).astype(np.int64)
    return np.fromiter((len(x) if x is not None else 0 for x in column), np.int64, len(column))


def flatten_list_column(column: pd.Series) -> np.ndarray:
    """Every element of a list column of integers, in order, as one int64 array."""
    if isinstance(column.dtype, pd.ArrowDtype):
        flat = pc.list_flatten(column.array._pa_array)
        return flat.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    arrays = [np.asarray(x, dtype=np.int64) for x in column if x is not None and len(x)]
    return np.concatenate(arrays) if arrays else np.empty(0, np.int64)


def read_parquet_frame(kind: str, path: Path) -> pd.DataFrame:
    """A record table's parquet file as a DataFrame, one column at a time.

    A million requests hold ~60M chunk timestamps: reading and converting column by column
    keeps only one column in both Arrow and pandas form at once, and the system allocator
    hands each freed Arrow buffer back to the OS (Arrow's default pool would keep it).
    """
    import pyarrow.parquet as pq

    previous_pool = pa.default_memory_pool()
    pa.set_memory_pool(pa.system_memory_pool())
    try:
        metadata = pq.read_metadata(path)  # one read gives the column names and the rows
        names = metadata.schema.to_arrow_schema().names
        columns = {}
        for name in names:
            table = pq.read_table(path, columns=[name])
            columns[name] = table.column(0).to_pandas()
            del table
        # A file written before an optional column was added reads it as nulls, so that
        # every run has the columns of the current schema.
        schema = SCHEMAS[kind]
        for name in _ADDED_COLUMNS.get(kind, ()):
            if name not in columns:
                columns[name] = pa.nulls(metadata.num_rows, schema.field(name).type).to_pandas()
        missing = [n for n in schema.names if n not in columns]
        if missing:  # a column name damaged on disk, or a file that is not a run's
            raise KeyError(f"columns {', '.join(missing)} are missing")
        order = [n for n in schema.names if n in columns]
        frame = pd.DataFrame(columns, columns=order + [n for n in names if n not in order])
    finally:
        pa.set_memory_pool(previous_pool)
    for column in _JSON_COLUMNS.get(kind, ()):
        frame[column] = frame[column].map(json.loads)
    return frame


def table_to_frame(kind: str, table: pa.Table, *, consume: bool = False) -> pd.DataFrame:
    """The DataFrame of a record table. ``consume=True`` (the table is not used again)
    lets Arrow free each column as it is converted: a million requests hold ~60M chunk
    timestamps, and both copies then never coexist whole."""
    frame = table.to_pandas(split_blocks=True, self_destruct=consume)
    for column in _JSON_COLUMNS.get(kind, ()):
        frame[column] = frame[column].map(json.loads)
    return frame


def records_frame(records: list) -> pd.DataFrame:
    """DataFrame of in-memory RequestRecords, typed exactly as a stored run reads back."""
    rows = [r.to_dict() for r in records]
    table = rows_to_table("requests", rows) if rows else REQUEST_SCHEMA.empty_table()
    return table_to_frame("requests", table)


def request_records(frame: pd.DataFrame) -> list:
    """RequestRecords back from a requests DataFrame (the inverse of ``records_frame``)."""
    from moeperf.collectors.records import RequestRecord

    table = pa.Table.from_pandas(frame, schema=REQUEST_SCHEMA, preserve_index=False)
    return [RequestRecord(**row) for row in table.to_pylist()]
