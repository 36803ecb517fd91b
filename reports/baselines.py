"""Baselines: immutable, content-hashed copies of a run, versioned under reports/baselines/.

Layout: ``<root>/NAME/vN/`` holds the run's record files that exist (manifest.json,
summary.json, requests.parquet, steps.parquet, samples.parquet, accelerator.parquet;
server_metrics.jsonl is not kept) and ``baseline.json`` (format in
``reports.baseline_migrations``): the source run, its status, its host fingerprint, the
sha256 of every file and one content hash over them all.

A version is built in a temporary directory beside its target and renamed into place, so a
version either exists whole or not at all; nothing is ever overwritten. Files are made
read-only, but git does not keep that: the hashes, checked on every read, are the guard.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from moeperf.collectors.errors import CollectorError
from moeperf.collectors.serving_records import ServingSummary
from moeperf.collectors.store import RunReader
from moeperf.collectors.summary_types import RunSummary
from moeperf.reports.baseline_files import (
    RECORD_FILES,
    REQUIRED_FIELDS,
    copy_manifest,
    open_run,
    promotable_files,
    restore_advice,
    sha256_of,
)
from moeperf.reports.baseline_migrations import BASELINE_SCHEMA_VERSION, content_hash, migrate
from moeperf.reports.baseline_names import NAME_PATTERN, check_name
from moeperf.reports.comparability import spec_differences
from moeperf.reports.errors import BaselineCorruptError, ReportUsageError
from moeperf.reports.promotion import promotion_problems
from moeperf.reports.runs import RunData
from moeperf.reports.summary_rows import metric_rows

DEFAULT_ROOT = "reports/baselines"
BASELINE_FILE = "baseline.json"
_VERSION_DIR = re.compile(r"v([1-9][0-9]*)\Z")
# What a field of baseline.json must be (after migration); bool is refused where int is.
_FIELD_TYPES: dict[str, type | tuple[type, ...]] = {
    "name": str,
    "version": int,
    "created": str,
    "source_run_id": str,
    "suite": (str, type(None)),
    "run_status": str,
    "run_status_reason": (str, type(None)),
    "host": dict,
    "files": dict,
    "content_hash": str,
}

TREND_COLUMNS = ("version", "created", "scenario", "metric", "value", "ci_low", "ci_high", "count")


@dataclass(frozen=True)
class BaselineVersion:
    """One verified version of a baseline (what ``baseline.json`` says, hashes checked)."""

    name: str
    version: int
    path: Path
    created: str
    source_run_id: str
    suite: str | None
    run_status: str
    run_status_reason: str | None
    host: dict[str, Any]
    files: dict[str, str]
    content_hash: str
    # What --force overrode when it was promoted, as "promoted although ..." ends: the run's
    # problems (``promotion_problems``), its spec's differences from the previous version;
    # empty when nothing was forced.
    forced: tuple[str, ...] = ()

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"


@dataclass(frozen=True)
class BaselineSummary:
    """A baseline name in ``list()``: its versions, and the latest one's date and host."""

    name: str
    versions: tuple[int, ...]
    latest: int
    created: str
    host_cpu: str | None


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class BaselineStore:
    """The baselines under one root (``reports/baselines`` by default, committed to git)."""

    def __init__(
        self,
        root: str | os.PathLike = DEFAULT_ROOT,
        *,
        now: Callable[[], dt.datetime] = _now,
    ):
        self.root = Path(root)
        self._now = now

    def names(self) -> list[str]:
        if not self.root.is_dir():
            return []
        dirs = (p.name for p in self.root.iterdir() if p.is_dir() and NAME_PATTERN.match(p.name))
        return sorted(n for n in dirs if self.versions(n))

    def versions(self, name: str) -> list[int]:
        """The versions of ``name``, oldest first (temporary build directories ignored)."""
        check_name(name)
        directory = self.root / name
        if not directory.is_dir():
            return []
        found = (_VERSION_DIR.match(p.name) for p in directory.iterdir() if p.is_dir())
        return sorted(int(m[1]) for m in found if m)

    def promote(
        self,
        run: RunReader | str | os.PathLike,
        name: str,
        version: int | None = None,
        *,
        force: bool = False,
    ) -> BaselineVersion:
        """Copy a finished run into ``NAME/vN``; N is the next version when not given.

        A run with ``promotion_problems`` (aborted, invalid, failed levels, a failed gate
        verdict) needs ``force``; a running run is refused even then.
        """
        check_name(name)
        reader = open_run(run)
        files = promotable_files(reader, force)
        existing = self.versions(name)
        forced = promotion_problems(reader) if force else []
        if existing:
            forced += self._spec_changes(reader, name, existing[-1], force)
        if version is None:
            version = max(existing, default=0) + 1
        elif isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise ReportUsageError(f"baseline version {version!r}: versions are integers >= 1")
        elif existing and version <= existing[-1]:
            raise ReportUsageError(
                f"baseline {name}@{version}: versions only go up and are never overwritten "
                f"({name} has {', '.join(map(str, existing))}); use a version above {existing[-1]}"
            )
        target = self.root / name / f"v{version}"
        tmp = None
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".v{version}-", suffix=".tmp", dir=target.parent))
            self._build(reader, name, version, files, tmp, forced)
            # Renaming onto an existing (never empty) version fails: nothing is overwritten.
            os.rename(tmp, target)
        except BaseException as exc:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
            if not isinstance(exc, OSError):
                raise
            if target.exists():
                raise ReportUsageError(
                    f"baseline {name}@{version} already exists (promoted concurrently?); "
                    "nothing was overwritten"
                ) from None
            raise ReportUsageError(f"could not write baseline {target}: {exc}") from None
        return self.get(name, version)

    def _spec_changes(self, reader: RunReader, name: str, last: int, force: bool) -> list[str]:
        """How the run's spec differs from baseline ``name``'s last version; refused
        (exit 2) unless forced. A new version of another spec would make every later run
        of the baseline's own spec "not comparable": the gate's advice once did that."""
        previous = open_run(self.root / name / f"v{last}").manifest
        differences = spec_differences(previous, reader.manifest)
        if differences and not force:
            lines = "\n".join(f"  {d.describe()}" for d in differences)
            spec = reader.manifest.spec_resolved.get("name") or "this spec"
            raise ReportUsageError(
                f"run {reader.run_id} ran a different spec from baseline {name}@{last} "
                f"({len(differences)} field(s) differ; baseline = {name}@{last}, candidate "
                f"= the run):\n{lines}\nstart a baseline of its own instead (--name {spec}), "
                f"or pass --force to make it {name}@{last + 1} anyway (recorded in its "
                "baseline.json)"
            )
        return [f"its spec differs from {name}@{last}: {d.describe()}" for d in differences]

    def _build(
        self,
        reader: RunReader,
        name: str,
        version: int,
        files: list[str],
        tmp: Path,
        forced: list[str],
    ) -> None:
        hashes = {}
        for file in files:
            if file == "manifest.json":
                copy_manifest(reader, tmp / file)
            else:
                shutil.copyfile(reader.directory / file, tmp / file)
            hashes[file] = sha256_of(tmp / file)
            os.chmod(tmp / file, 0o444)
        manifest = reader.manifest
        meta = {
            "schema_version": BASELINE_SCHEMA_VERSION,
            "name": name,
            "version": version,
            "created": self._now().astimezone(dt.UTC).isoformat(timespec="milliseconds"),
            "source_run_id": manifest.run_id,
            "suite": manifest.suite,
            "run_status": manifest.status,
            "run_status_reason": manifest.status_reason,
            "host": manifest.host,
            "files": hashes,
            "content_hash": content_hash(hashes),
        }
        if forced:
            meta["forced"] = forced
        path = tmp / BASELINE_FILE
        path.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.chmod(path, 0o444)
        os.chmod(tmp, 0o755)  # mkdtemp's 0o700 would hide it from other users

    def _resolve(self, name: str, version: int | None) -> int:
        versions = self.versions(name)
        if not versions:
            known = ", ".join(self.names()) or "none"
            raise ReportUsageError(f"no baseline {name!r} under {self.root}/ (baselines: {known})")
        if version is None:
            return versions[-1]
        if version not in versions:
            raise ReportUsageError(
                f"baseline {name!r} has no version {version} "
                f"(versions: {', '.join(map(str, versions))})"
            )
        return version

    def _read_meta(self, name: str, version: int) -> dict[str, Any]:
        """baseline.json of a version, migrated to the current format (hashes not checked)."""
        path = self.root / name / f"v{version}" / BASELINE_FILE
        where = f"baseline {name}@{version}: {path}"

        def damaged(what: str) -> BaselineCorruptError:
            return BaselineCorruptError(f"{where} {what}; {restore_advice(path.parent)}")

        try:
            text = path.read_bytes().decode("utf-8")
        except FileNotFoundError:
            raise damaged("is missing") from None
        except UnicodeDecodeError as exc:
            raise damaged(f"is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        except OSError as exc:
            raise damaged(f"cannot be read ({exc.strerror or exc})") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise damaged(
                f"is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}): "
                "truncated or overwritten"
            ) from None
        except (ValueError, RecursionError) as exc:  # a number past Python's digit limit,
            # or nesting past the recursion limit: not what moeperf writes
            raise damaged(f"is not a baseline's JSON ({type(exc).__name__})") from None
        if not isinstance(data, dict):
            raise damaged("is not a JSON object")
        data = migrate(data, where)
        for key in REQUIRED_FIELDS:
            if key not in data:
                raise damaged(f"is incomplete: field {key!r} is missing")
        for key, kinds in _FIELD_TYPES.items():
            value = data.get(key)  # suite and run_status_reason may be absent: None
            if not isinstance(value, kinds) or isinstance(value, bool):
                raise damaged(f"has a field {key!r} of the wrong type: {value!r:.40}")
        if data["name"] != name or data["version"] != version:
            raise damaged(f"describes {data['name']}@{data['version']}: it was moved or copied")
        files = data["files"]
        if "manifest.json" not in files:
            raise damaged("has a 'files' that does not list manifest.json")
        if not all(isinstance(sha, str) for sha in files.values()):
            raise damaged("has a file hash in 'files' that is not a string")
        return data

    def get(self, name: str, version: int | None = None) -> BaselineVersion:
        """A version (the latest when None), every file's hash verified."""
        check_name(name)
        version = self._resolve(name, version)
        meta = self._read_meta(name, version)
        directory = self.root / name / f"v{version}"
        where = f"baseline {name}@{version} ({directory})"

        def corrupt(what: str) -> BaselineCorruptError:
            return BaselineCorruptError(f"{where}: {what}; {restore_advice(directory)}")

        recorded: dict[str, str] = meta["files"]
        for file in recorded:
            if file not in RECORD_FILES:
                raise corrupt(f"baseline.json lists unknown file {file!r}")
        present = {p.name for p in directory.iterdir()} - {BASELINE_FILE}
        if missing := sorted(set(recorded) - present):
            raise corrupt(f"missing file recorded in baseline.json: {', '.join(missing)}")
        if extra := sorted(present - set(recorded)):
            raise corrupt(f"extra file not in baseline.json: {', '.join(extra)}")
        for file, expected in sorted(recorded.items()):
            found = sha256_of(directory / file) if (directory / file).is_file() else "not a file"
            if found != expected:
                raise corrupt(
                    f"{file} does not match its recorded sha256 "
                    f"(recorded {expected[:12]}..., found {found[:12]}...): it was modified "
                    "(truncated, overwritten or edited)"
                )
        if meta["content_hash"] != content_hash(recorded):
            raise corrupt("baseline.json's content_hash does not match its file hashes")
        return BaselineVersion(
            name=name,
            version=version,
            path=directory,
            created=meta["created"],
            source_run_id=meta["source_run_id"],
            suite=meta.get("suite"),
            run_status=meta["run_status"],
            run_status_reason=meta.get("run_status_reason"),
            host=meta["host"],
            files=dict(recorded),
            content_hash=meta["content_hash"],
            forced=tuple(str(f) for f in meta.get("forced") or ()),
        )

    def list(self) -> list[BaselineSummary]:
        """Every baseline name with its versions (metadata only: hashes are checked by get)."""
        summaries = []
        for name in self.names():
            versions = self.versions(name)
            meta = self._read_meta(name, versions[-1])
            cpu = meta["host"].get("cpu_model")
            summaries.append(
                BaselineSummary(
                    name,
                    tuple(versions),
                    versions[-1],
                    meta["created"],
                    cpu if isinstance(cpu, str) else None,
                )
            )
        return summaries

    def load_run_data(self, name: str, version: int | None = None) -> RunData:
        """A verified version as ``RunData``, read exactly as a run is (no server metrics)."""
        return _run_data(self.get(name, version))

    def trend(self, name: str) -> pd.DataFrame:
        """Summary metrics of every version, one row per (version, scenario, metric)."""
        self._resolve(name, None)  # an unknown name is an error, not an empty trend
        rows: list[dict[str, Any]] = []
        for version in self.versions(name):
            baseline = self.get(name, version)
            summary = _summary(baseline)
            created = pd.Timestamp(baseline.created)
            scenarios = summary.scenarios if isinstance(summary, ServingSummary) else {}
            for scenario, entry in scenarios.items():
                head = {"version": version, "created": created, "scenario": scenario}
                rows += [{**head, **dataclasses.asdict(row)} for row in metric_rows(entry)]
        frame = pd.DataFrame(rows, columns=list(TREND_COLUMNS))
        frame["count"] = frame["count"].astype("Int64")
        return frame


def _run_data(baseline: BaselineVersion) -> RunData:
    try:
        reader = RunReader(baseline.path)
        requests, steps, samples = reader.requests(), reader.steps(), reader.samples()
        accelerator = tuple(reader.accelerator_samples())
        harness_errors = reader.harness_errors()
        summary = reader.summary()
    except (CollectorError, OSError, ValueError) as exc:
        raise ReportUsageError(f"baseline {baseline.ref}: {exc}") from None
    return RunData(
        manifest=reader.manifest,
        requests=requests,
        steps=steps,
        summary=summary,
        server_metrics=[],
        samples=samples,
        accelerator=accelerator,
        harness_errors=harness_errors,
    )


def _summary(baseline: BaselineVersion) -> RunSummary | None:
    try:
        return RunReader(baseline.path).summary()
    except (CollectorError, OSError, ValueError) as exc:
        raise ReportUsageError(f"baseline {baseline.ref}: {exc}") from None
