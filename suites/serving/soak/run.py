"""A soak in a serving run: the memory watch around its level, then its summary.

The runner calls ``start`` and ``finish`` around the level, as it does a drill's, and
``summary`` once the level's records are in; ``soak_verdict`` folds the findings into the
run's status.
"""

from __future__ import annotations

import pandas as pd

from moeperf.collectors.soak_records import SoakSummary, SoakThresholds
from moeperf.collectors.soak_summary import SoakPlan, summarize_soak
from moeperf.collectors.store import RunReader, RunWriter
from moeperf.suites.serving.embedded.process import EmbeddedTarget
from moeperf.suites.serving.soak.memory import MemoryWatch
from moeperf.suites.serving.soak.spec import SoakSpec
from moeperf.suites.serving.spec import ServingSpec

MIB = 2**20


class Soak:
    """One soak level's watch: the target's memory while it runs (embedded targets)."""

    def __init__(self, spec: ServingSpec, process: EmbeddedTarget | None, run: RunWriter):
        assert spec.soak is not None
        self.spec: SoakSpec = spec.soak
        self._load = spec.load
        self._run = run
        self._anchor_ns = run.manifest.anchor_monotonic_ns
        self.memory: MemoryWatch | None = None
        if process is not None:
            self.memory = MemoryWatch(
                lambda: process.pid,
                self.spec.memory_interval_s,
                self._anchor_ns,
                run.append_memory_sample,
            )
        self._scenario = ""
        self._start_ns = 0

    def level_started(self, scenario: str, start_ns: int) -> None:
        """``start_ns``: when the level's workers start sending (time.monotonic_ns); a level
        hook (suites/serving/level_loop.py)."""
        self._scenario, self._start_ns = scenario, start_ns
        if self.memory is not None:
            self.memory.start(scenario)

    def level_ended(self) -> None:
        if self.memory is not None:
            self.memory.finish()

    def summary(self, requests: pd.DataFrame) -> SoakSummary | None:
        """The level's summary from the run's requests (a frame as the store reads it)."""
        if not self._scenario:
            return None  # the level never started
        soak, load = self.spec, self._load
        assert load.duration_s is not None  # the spec's validator requires it
        plan = SoakPlan(
            scenario=self._scenario,
            level_start_ns=self._start_ns - self._anchor_ns,
            measure_from_s=load.warmup_s,
            measure_to_s=load.duration_s - load.cooldown_s,
            window_s=soak.window_s,
            memory_interval_s=soak.memory_interval_s,
            thresholds=SoakThresholds(
                leak_min_bytes_per_hour=soak.leak_min_mib_per_hour * MIB,
                leak_min_percent_per_hour=soak.leak_min_percent_per_hour,
                drift_min_percent_per_hour=soak.drift_min_percent_per_hour,
                drift_min_percent=soak.drift_min_percent,
                kv_min_points_per_hour=soak.kv_min_points_per_hour,
                expert_drift_max=soak.expert_drift_max,
                kv_min_points=soak.kv_min_points,
            ),
        )
        memory = self.memory.samples if self.memory is not None else []
        scrapes = RunReader(self._run.directory).server_metrics()
        return summarize_soak(requests, memory, scrapes, plan)


def soak_verdict(soak: SoakSummary, status: str, reason: str | None) -> tuple[str, str | None]:
    """The run's status and reason, given the level's own (``run_verdict``'s).

    A finding that fails the run (a leak, a drift, KV usage rising) makes a complete run
    failed, with every such finding in the reason; a run already failed or invalid keeps
    its status, and its reason gains the findings.
    """
    found = [f"{v.name}: {v.reason}" for v in soak.failures]
    if not found:
        return status, reason
    text = "soak found " + "; ".join(found)
    if status == "complete":
        return "failed", text
    return status, f"{reason}; {text}" if reason else text
