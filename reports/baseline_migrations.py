"""The format of ``baseline.json`` and the registered steps that migrate older formats.

Current format (schema_version 1)::

    {
      "schema_version": 1,
      "name": "serving-cpu", "version": 3,
      "created": "2025-01-02T03:04:05.678+00:00",      # UTC, when the version was promoted
      "source_run_id": "20250102-...", "suite": "serving",
      "run_status": "complete", "run_status_reason": null,
      "host": {...},                                    # the manifest's host fingerprint
      "files": {"manifest.json": "<sha256 hex>", ...},  # every other file of the version
      "content_hash": "<sha256 hex>"                    # see content_hash()
    }

Format 0 (pre-release, written before baselines were released; read-only now)::

    {
      "schema_version": 0,
      "name": "serving-cpu", "version": 3, "created": "...",
      "run_id": "20250102-...",                         # became source_run_id
      "status": "complete",                             # became run_status (no reason kept)
      "host": {...},
      "sha256": {"manifest.json": "<sha256 hex>", ...}  # became files
    }

Format 0 had no suite, no status reason and no content hash. Migration happens in memory
when a baseline is read; the files of a version are never rewritten (they are immutable and
their hashes are what guards them).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from moeperf.reports.errors import BaselineCorruptError, ReportUsageError

BASELINE_SCHEMA_VERSION = 1


def content_hash(files: dict[str, str]) -> str:
    """sha256 of the lines "NAME SHA256\\n", sorted by file name: one hash per version."""
    lines = "".join(f"{name} {sha}\n" for name, sha in sorted(files.items()))
    return hashlib.sha256(lines.encode("utf-8")).hexdigest()


def _require(data: dict[str, Any], key: str, where: str) -> Any:
    if key not in data:
        raise BaselineCorruptError(f"{where}: field {key!r} is missing")
    return data[key]


def migrate_0_to_1(data: dict[str, Any], where: str) -> dict[str, Any]:
    """Format 0 -> 1: rename run_id, status and sha256; add suite, reason and content_hash."""
    files = _require(data, "sha256", where)
    if not isinstance(files, dict):
        raise BaselineCorruptError(f"{where}: field 'sha256' is not an object")
    migrated = {k: v for k, v in data.items() if k not in ("run_id", "status", "sha256")}
    migrated.update(
        schema_version=1,
        source_run_id=_require(data, "run_id", where),
        suite=None,
        run_status=_require(data, "status", where),
        run_status_reason=None,
        files=dict(files),
        content_hash=content_hash(files),
    )
    return migrated


# from_version -> the step that turns it into from_version + 1.
MIGRATIONS: dict[int, Callable[[dict[str, Any], str], dict[str, Any]]] = {0: migrate_0_to_1}


def check_baseline_schema_version(found: object, where: str) -> None:
    """Refuse a baseline.json written in a format this moeperf neither reads nor migrates."""
    if type(found) is int and (found == BASELINE_SCHEMA_VERSION or found in MIGRATIONS):
        return
    readable = sorted({BASELINE_SCHEMA_VERSION, *MIGRATIONS})
    supported = ", ".join(str(v) for v in readable)
    if type(found) is int and found > BASELINE_SCHEMA_VERSION:
        advice = "it was written by a newer moeperf: upgrade moeperf (pip install -U moeperf)"
    else:
        advice = (
            "it is not a moeperf baseline or was written by an unreleased version: "
            "promote the run again (moeperf baseline promote RUN --name NAME)"
        )
    raise ReportUsageError(
        f"{where}: schema_version {found!r} is not supported (this moeperf reads {supported}); "
        f"{advice}"
    )


def migrate(data: dict[str, Any], where: str) -> dict[str, Any]:
    """``data`` in the current format, through every registered step from its own."""
    check_baseline_schema_version(data.get("schema_version"), where)
    while data["schema_version"] < BASELINE_SCHEMA_VERSION:
        start = data["schema_version"]
        data = MIGRATIONS[start](data, where)
        if data.get("schema_version") != start + 1:
            raise AssertionError(f"migration from {start} did not produce {start + 1}")
    return data
