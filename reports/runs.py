"""Loading runs for reports, baselines and the gate: one small record per run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from moeperf.collectors.accel_records import DeviceSample
from moeperf.collectors.errors import CollectorError
from moeperf.collectors.manifest import RunManifest
from moeperf.collectors.store import RunStore
from moeperf.collectors.summary_types import RunSummary
from moeperf.reports.errors import ReportUsageError


@dataclass(frozen=True)
class RunData:
    """Everything a report or the gate reads of one run."""

    manifest: RunManifest
    requests: pd.DataFrame
    steps: pd.DataFrame
    summary: RunSummary | None  # None: the run ended before it wrote one
    server_metrics: list[dict[str, Any]]
    # Named measurements that are neither requests nor steps (micro-benchmark rounds).
    samples: pd.DataFrame
    # The device sampler's readings ([telemetry]), in the order taken.
    accelerator: tuple[DeviceSample, ...] = ()
    # The harness's error per request against the synthetic target's own stamps (empty
    # for any other target): collectors.harness_errors.HarnessError's columns.
    harness_errors: pd.DataFrame = field(default_factory=pd.DataFrame)

    @property
    def run_id(self) -> str:
        return self.manifest.run_id

    @property
    def kind(self) -> str:
        """The suite that wrote the run: "serving", "training" or "micro"."""
        return self.manifest.suite


def resolved_spec(run: RunData) -> dict[str, Any]:
    """The run's spec as resolved (as given, for a run that stored none)."""
    return run.manifest.spec_resolved or run.manifest.spec_given or {}


def load_run(store: RunStore, run: str) -> RunData:
    """A run by id, prefix, directory or "latest"; a clear usage error if unreadable."""
    try:
        reader = store.open(run)
        return RunData(
            manifest=reader.manifest,
            requests=reader.requests(),
            steps=reader.steps(),
            summary=reader.summary(),
            server_metrics=reader.server_metrics(),
            samples=reader.samples(),
            accelerator=tuple(reader.accelerator_samples()),
            harness_errors=reader.harness_errors(),
        )
    except CollectorError as exc:
        raise ReportUsageError(str(exc)) from None
