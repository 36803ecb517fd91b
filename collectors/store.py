"""RunStore: one directory per run, records appended and flushed as they happen.

Layout of ``<root>/<run_id>/``: manifest.json, requests.jsonl / requests.parquet,
steps.jsonl / steps.parquet, accelerator.jsonl / accelerator.parquet, harness_errors.jsonl /
harness_errors.parquet, server_metrics.jsonl, summary.json. A run that dies keeps everything
already appended: JSONL lines are flushed one by one, and readers fall back to them when the
parquet files of a finished run are not there.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import secrets
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from moeperf.collectors.accel_records import DeviceSample
from moeperf.collectors.errors import (
    CollectorError,
    CorruptRunFileError,
    RunInterrupted,
    RunNotFoundError,
    RunsDirError,
    SchemaVersionError,
)
from moeperf.collectors.harness_errors import HarnessError
from moeperf.collectors.manifest import RunManifest, RunStatus
from moeperf.collectors.records import RequestRecord, SampleRecord, StepRecord
from moeperf.collectors.request_settings import RequestSettings
from moeperf.collectors.run_json import damaged, read_json, read_jsonl
from moeperf.collectors.schema import SCHEMA_VERSION
from moeperf.collectors.soak_records import MemorySample

if TYPE_CHECKING:
    import pandas as pd

    from moeperf.collectors.summary_types import RunSummary


@contextmanager
def interrupts_end_runs() -> Iterator[None]:
    """Turn SIGINT and SIGTERM into ``RunInterrupted`` for the duration of the block."""

    def handler(signum: int, _frame: Any) -> None:
        raise RunInterrupted(signal.Signals(signum).name)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def _host() -> dict[str, Any]:
    # psutil and the installed libraries' versions: read when a run starts, not imported by
    # commands that only read runs.
    from moeperf.collectors.sources.fingerprint import host_fingerprint

    return host_fingerprint()


def _now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def _git_sha() -> str | None:
    here = Path(__file__).resolve().parent
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


class RunWriter:
    """Appends the records of one run and ends it with a status.

    Used as a context manager: leaving the block normally completes the run (unless it
    was already ended), an exception or ``RunInterrupted`` aborts it with the reason.
    """

    def __init__(self, directory: Path, manifest: RunManifest):
        self.directory = directory
        self.manifest = manifest
        self._files: dict[str, Any] = {}
        self._write_manifest()

    @property
    def run_id(self) -> str:
        return self.manifest.run_id

    def _write_manifest(self) -> None:
        _write_atomic(self.directory / "manifest.json", self.manifest.to_json())

    def _append(self, name: str, row: dict[str, Any]) -> None:
        f = self._files.get(name)
        if f is None:
            path = self.directory / f"{name}.jsonl"
            # Kept open for the run's life and closed when it ends (_end).
            f = self._files[name] = open(path, "a", encoding="utf-8")  # noqa: SIM115
        f.write(json.dumps(row, separators=(",", ":")) + "\n")
        # Flushed per record: a crash loses nothing that was already measured.
        f.flush()

    def append_request(self, record: RequestRecord) -> None:
        """Append a request record; one with an id already appended amends it.

        Readers keep the last record per ``request_id``: a record is written as soon as
        its request ends, and again if client-side token counts are added later.
        """
        self._append("requests", record.to_dict())

    def requests_frame(self) -> pd.DataFrame:
        """Every request appended so far (the latest version of each), read back from the
        run's file as a RunReader would: the harness keeps no request in memory to
        summarize a run, so its memory does not grow with the run's length."""
        from moeperf.collectors.run_tables import requests_frame

        return requests_frame(self.directory)

    def append_step(self, record: StepRecord) -> None:
        self._append("steps", record.to_dict())

    def append_sample(self, record: SampleRecord) -> None:
        self._append("samples", record.to_dict())

    def append_memory_sample(self, sample: MemorySample) -> None:
        """Called from a soak's sampling thread; it alone writes memory.jsonl."""
        self._append("memory", sample.to_dict())

    def append_device_sample(self, sample: DeviceSample) -> None:
        """Called from the accelerator sampler's thread; it alone writes accelerator.jsonl."""
        self._append("accelerator", sample.to_dict())

    def append_harness_error(self, error: HarnessError) -> None:
        self._append("harness_errors", error.to_dict())

    def append_server_metrics(self, sample: dict[str, Any]) -> None:
        self._append("server_metrics", {"schema_version": SCHEMA_VERSION, **sample})

    def add_note(self, note: str) -> None:
        self.manifest.notes.append(note)
        self._write_manifest()

    def record_request_settings(self, settings: RequestSettings) -> None:
        """Store what every request of the run asks of the target, before any is sent."""
        self.manifest.request_settings = settings
        self._write_manifest()

    def write_summary(self, summary: RunSummary) -> None:
        from moeperf.collectors.summary_json import summary_to_json

        body = summary_to_json(summary)
        _write_atomic(self.directory / "summary.json", json.dumps(body, indent=2))

    @property
    def ended(self) -> bool:
        return self.manifest.status != "running"

    def complete(self) -> None:
        self._end("complete", None)

    def abort(self, reason: str) -> None:
        self._end("aborted", reason)

    def invalidate(self, reason: str) -> None:
        self._end("invalid", reason)

    def fail(self, reason: str) -> None:
        """End a run that ran to its end with levels the target failed (reason: which)."""
        self._end("failed", reason)

    def _end(self, status: RunStatus, reason: str | None) -> None:
        if self.ended:
            raise CollectorError(f"run {self.run_id} already ended as {self.manifest.status}")
        for f in self._files.values():
            f.close()
        self._files.clear()
        from moeperf.collectors.run_tables import RECORD_FILES, jsonl_to_parquet

        for kind, name in RECORD_FILES.items():
            try:
                jsonl_to_parquet(self.directory, kind, name)
            except (ValueError, TypeError, OSError) as exc:  # pyarrow's errors are ValueErrors
                # The run still ends; its records stay readable as JSONL.
                note = f"{name}.parquet not written ({type(exc).__name__}: {exc}); kept as JSONL"
                reason = f"{reason}; {note}" if reason else note
        self.manifest.status = status
        self.manifest.status_reason = reason
        self.manifest.ended_wall_time = _now_iso()
        self._write_manifest()

    def __enter__(self) -> RunWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        if self.ended:
            return
        if exc_type is None:
            self.complete()
        elif isinstance(exc, RunInterrupted):
            self.abort(f"interrupted by {exc.signal_name}")
        elif isinstance(exc, KeyboardInterrupt):
            self.abort("interrupted by SIGINT")
        else:
            self.abort(f"{exc_type.__name__}: {exc}")


class RunReader:
    """Read access to a run directory, whatever state the run ended in."""

    def __init__(self, directory: Path):
        self.directory = directory
        path = directory / "manifest.json"
        data = read_json(path)
        if not isinstance(data, dict):
            raise damaged(path, "not a JSON object")
        try:
            self.manifest = RunManifest.from_dict(data, str(path))
        except (TypeError, KeyError, ValueError) as exc:
            raise damaged(path, f"not a run manifest ({exc})") from None
        _mark_if_orphaned(self.manifest)

    @property
    def run_id(self) -> str:
        return self.manifest.run_id

    def _frame(self, kind: str) -> pd.DataFrame:
        from moeperf.collectors.run_tables import read_frame

        return read_frame(self.directory, kind)

    def memory_samples(self) -> list[MemorySample]:
        """A soak's samples of the target's resident memory, in the order taken."""
        from moeperf.collectors.run_tables import memory_samples

        return memory_samples(self.directory)

    def accelerator_samples(self) -> list[DeviceSample]:
        """The accelerator sampler's readings, in the order taken (nulls back to None)."""
        from moeperf.collectors.run_tables import accelerator_samples

        return accelerator_samples(self.directory)

    def requests(self) -> pd.DataFrame:
        return self._frame("requests")

    def harness_errors(self) -> pd.DataFrame:
        """The harness's error per matched request (HarnessError's columns); empty for a
        run against a target that does not stamp its own times."""
        return self._frame("harness_errors")

    def steps(self) -> pd.DataFrame:
        return self._frame("steps")

    def samples(self) -> pd.DataFrame:
        return self._frame("samples")

    def server_metrics(self) -> list[dict[str, Any]]:
        path = self.directory / "server_metrics.jsonl"
        return read_jsonl(path) if path.exists() else []

    def summary(self) -> RunSummary | None:
        """The run's summary record; None until the run has written one."""
        path = self.directory / "summary.json"
        if not path.exists():
            return None
        from moeperf.collectors.summary_json import summary_from_json

        return summary_from_json(read_json(path), str(path))


def _mark_if_orphaned(manifest: RunManifest) -> None:
    """A run still 'running' whose process is gone was killed without a chance to say so."""
    if manifest.status != "running" or manifest.pid is None:
        return
    if manifest.hostname != socket.gethostname():
        return
    import psutil  # only for a run still marked running

    try:
        started_s = psutil.Process(manifest.pid).create_time()
    except psutil.Error:
        started_s = None  # no such process
    anchor_s = dt.datetime.fromisoformat(manifest.anchor_wall_time).timestamp()
    # A live process started after the run began reuses the pid: ours is gone.
    if started_s is not None and started_s <= anchor_s + 1.0:
        return
    manifest.status = "aborted"
    manifest.status_reason = f"process {manifest.pid} ended without closing the run (killed?)"


class RunStore:
    """All runs under one root directory (``runs/`` by default)."""

    def __init__(
        self,
        root: str | os.PathLike = "runs",
        clock_ns: Callable[[], int] = time.monotonic_ns,
    ):
        self.root = Path(root)
        self._clock_ns = clock_ns

    def create(
        self,
        suite: str,
        *,
        spec_given: dict[str, Any] | None = None,
        spec_resolved: dict[str, Any] | None = None,
        target: dict[str, Any] | None = None,
    ) -> RunWriter:
        """Start a run: make its directory and write its manifest with status running."""
        # Microseconds: ids sort by start time even for runs started in the same second.
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S-%f")
        run_id = f"{stamp}-{suite}-{secrets.token_hex(3)}"
        self.run_ids()  # a runs directory that is a file: said now, before anything runs
        directory = self.root / run_id
        directory.mkdir(parents=True)
        manifest = RunManifest(
            run_id=run_id,
            suite=suite,
            anchor_monotonic_ns=self._clock_ns(),
            anchor_wall_time=_now_iso(),
            host=_host(),
            spec_given=spec_given or {},
            spec_resolved=spec_resolved or {},
            target=target or {},
            git_sha=_git_sha(),
            pid=os.getpid(),
            hostname=socket.gethostname(),
        )
        return RunWriter(directory, manifest)

    def open(self, run: str) -> RunReader:
        """Open a run by id, unique id prefix, directory path, or "latest"."""
        path = Path(run)
        if (path / "manifest.json").exists():
            return RunReader(path)
        ids = self.run_ids()
        if run == "latest" and ids:
            return RunReader(self.root / ids[-1])
        matches = [i for i in ids if i.startswith(run)]
        if len(matches) == 1:
            return RunReader(self.root / matches[0])
        if not matches:
            raise RunNotFoundError(f"no run {run!r} under {self.root}/ (see `moeperf runs list`)")
        raise RunNotFoundError(f"{run!r} matches {len(matches)} runs: {', '.join(matches[:5])}")

    def run_ids(self) -> list[str]:
        """Run ids, oldest first (ids begin with their UTC start time)."""
        if not self.root.exists():
            return []
        if not self.root.is_dir():
            raise RunsDirError(
                f"runs directory {str(self.root)!r} is a file, not a directory; "
                "give --runs-dir a directory (it is created when missing)"
            )
        return sorted(p.name for p in self.root.iterdir() if (p / "manifest.json").exists())

    def list(self) -> list[RunManifest]:
        return [RunReader(self.root / i).manifest for i in self.run_ids()]

    def scan(self) -> tuple[Sequence[RunManifest], Sequence[CollectorError]]:
        """Every readable run's manifest, and what is wrong with each unreadable one (a
        damaged run, or one written by a newer moeperf, does not hide the others)."""
        manifests: list[RunManifest] = []
        problems: list[CollectorError] = []
        for run_id in self.run_ids():
            try:
                manifests.append(RunReader(self.root / run_id).manifest)
            except (CorruptRunFileError, SchemaVersionError) as exc:
                problems.append(exc)
        return manifests, problems
