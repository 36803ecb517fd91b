"""The files of a run a baseline keeps: which are copied (records, summary, manifest), what a
run must hold to be promoted, and their checksums."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from moeperf.collectors.errors import CollectorError
from moeperf.collectors.store import RunReader
from moeperf.reports.errors import ReportUsageError
from moeperf.reports.promotion import promotion_problems

# The run's files a baseline keeps, where the run has them.
RECORD_FILES = (
    "manifest.json",
    "summary.json",
    "requests.parquet",
    "steps.parquet",
    "samples.parquet",
    "accelerator.parquet",
    "harness_errors.parquet",
)


RECORD_JSONL = (
    "requests.jsonl",
    "steps.jsonl",
    "samples.jsonl",
    "accelerator.jsonl",
    "harness_errors.jsonl",
)


REQUIRED_FIELDS = (
    "name",
    "version",
    "created",
    "source_run_id",
    "run_status",
    "host",
    "files",
    "content_hash",
)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def restore_advice(directory: Path) -> str:
    """What to do about a damaged version: baselines are committed, never edited."""
    return (
        f"restore the version from git (git restore {directory}), or, if it was never "
        f"committed, remove {directory} and promote its run again"
    )


def open_run(run: RunReader | str | os.PathLike) -> RunReader:
    if isinstance(run, RunReader):
        return run
    if not (Path(run) / "manifest.json").exists():
        raise ReportUsageError(f"{run}: not a run directory (no manifest.json)")
    try:
        return RunReader(Path(run))
    except (CollectorError, OSError, ValueError) as exc:
        raise ReportUsageError(f"{run}: {exc}") from None


def promotable_files(reader: RunReader, force: bool) -> list[str]:
    """The record files to copy; refuses a run that is running or only in JSONL, and one
    with ``promotion_problems`` unless forced."""
    run, status = reader.run_id, reader.manifest.status
    if status == "running":
        raise ReportUsageError(
            f"run {run} has not ended (status running): promote it once it has completed"
        )
    problems = promotion_problems(reader)
    if problems and not force:
        raise ReportUsageError(
            f"run {run} is not promoted: {'; '.join(problems)}. Promote it only on purpose, "
            "with --force (the run's status is recorded in the baseline)"
        )
    for jsonl in RECORD_JSONL:
        # Both files: the run was killed between writing the parquet and removing the
        # JSONL (collectors.store); the parquet is whole (written aside, then renamed).
        parquet = Path(jsonl).with_suffix(".parquet").name
        if (reader.directory / jsonl).exists() and not (reader.directory / parquet).exists():
            raise ReportUsageError(
                f"run {run} keeps records only in {jsonl} (its parquet was not written: "
                "see the manifest's status reason); a baseline holds parquet files only"
            )
    try:  # refuse unreadable data now rather than when the baseline is read
        reader.requests(), reader.steps(), reader.samples(), reader.summary()
    except (CollectorError, OSError, ValueError) as exc:
        raise ReportUsageError(f"run {run}: {exc}") from None
    files = [f for f in RECORD_FILES if (reader.directory / f).is_file()]
    if files == ["manifest.json"]:
        raise ReportUsageError(f"run {run} has no records or summary to keep as a baseline")
    return files


def copy_manifest(reader: RunReader, target: Path) -> None:
    """The manifest as written, unless the reader inferred a status (an orphaned run)."""
    source = reader.directory / "manifest.json"
    written = json.loads(source.read_text(encoding="utf-8"))
    if written.get("status") == reader.manifest.status:
        shutil.copyfile(source, target)
    else:
        target.write_text(reader.manifest.to_json(), encoding="utf-8")
