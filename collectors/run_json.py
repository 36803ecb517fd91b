"""Reading a run's JSON and JSONL files, with errors that say which file is damaged and what
to do about it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from moeperf.collectors.errors import CorruptRunFileError
from moeperf.collectors.schema import check_schema_version


def damaged(path: Path, what: str) -> CorruptRunFileError:
    return CorruptRunFileError(
        f"{path}: {what}; the file is damaged (truncated or overwritten since it was written): "
        "restore it from a copy, or remove the run"
    )


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise damaged(path, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise damaged(path, f"not valid JSON ({exc.msg} at line {exc.lineno})") from None


def iter_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """The rows of a JSONL record file, one at a time (a long run's file is large)."""
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                row = json.loads(raw.decode("utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError):
                if not f.readline():
                    # The process died while writing its last line; the rest is whole.
                    return
                raise CorruptRunFileError(
                    f"{path}:{number}: not valid JSON, and not the last line (which a process "
                    "killed mid-write leaves cut); the file is damaged (truncated or "
                    "overwritten since it was written): restore it from a copy, or remove "
                    "the run"
                ) from None
            if not isinstance(row, dict):
                raise damaged(path, f"line {number} is not a JSON object")
            check_schema_version(row.get("schema_version"), f"{path}:{number}")
            yield row


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return list(iter_jsonl(path))
