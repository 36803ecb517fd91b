"""The accelerator sampler beside a run ([telemetry]): open the sources, label, stop.

A suite makes one ``Telemetry`` per run once the run is stored: it opens the spec's
sources (each is a source or "not available" with its reason, noted in the manifest) and
runs one ``DeviceSampler``. ``level_started`` / ``level_ended`` label the samples with the
level's (or training scenario's) name, "" between them; ``finish`` stops the sampler (also
on an abort path; it may be called twice) and closes the sources. Samples go to the run's
accelerator.jsonl as they are read, then to ``on_sample`` (the live export); none is kept
here: ``samples`` reads them back from the file when the summary is written. What the
figures are is the suite's to say (suites/serving/telemetry.py, suites/training).
"""

from __future__ import annotations

from collections.abc import Callable

from moeperf.collectors.accel_records import (
    AcceleratorFigures,
    DeviceSample,
    DeviceSource,
    SamplerCost,
    Unavailable,
)
from moeperf.collectors.sources.accel_sampler import DeviceSampler
from moeperf.collectors.sources.dcgm_source import open_dcgm
from moeperf.collectors.sources.nvml_source import open_nvml
from moeperf.collectors.sources.process_source import ProcessSource
from moeperf.collectors.store import RunReader, RunWriter
from moeperf.collectors.telemetry_records import SourceStatus, TelemetrySummary
from moeperf.suites.telemetry_spec import TelemetrySourceName, TelemetrySpec

NOT_STARTED_BY_US = "the target is not a process this harness started"


def open_source(
    name: TelemetrySourceName,
    spec: TelemetrySpec,
    pid: Callable[[], int] | None,
    no_process: str = NOT_STARTED_BY_US,
) -> DeviceSource | Unavailable:
    """One source of the spec, opened now; ``Unavailable`` with the reason where it cannot be.
    ``pid``: the process tree to watch, asked at every read (a restarted target's changes);
    ``no_process``: why there is none to watch, where ``pid`` is None."""
    if name == "nvml":
        return open_nvml()
    if name == "dcgm":
        assert spec.dcgm_url is not None  # the spec's validator requires it
        return open_dcgm(spec.dcgm_url)
    if pid is None:
        return Unavailable(no_process)
    return ProcessSource(pid)


class Telemetry:
    """One run's sampler over every level; ``finish`` may be called more than once."""

    def __init__(
        self,
        spec: TelemetrySpec,
        pid: Callable[[], int] | None,
        run: RunWriter,
        on_sample: Callable[[DeviceSample], None] = lambda _sample: None,
        no_process: str = NOT_STARTED_BY_US,
    ):
        self.spec = spec
        self._run = run
        self._on_sample = on_sample
        self._sources: list[DeviceSource] = []
        statuses = []
        for name in spec.sources:
            opened = open_source(name, spec, pid, no_process)
            if isinstance(opened, Unavailable):
                statuses.append(SourceStatus(name, unavailable=opened.reason))
            else:
                self._sources.append(opened)
                statuses.append(SourceStatus(name, name=opened.name))
        self.statuses = tuple(statuses)
        self._sampler: DeviceSampler | None = None
        if self._sources:
            self._sampler = DeviceSampler(
                self._sources,
                anchor_ns=run.manifest.anchor_monotonic_ns,
                store=self._store,
                period_s=spec.period_s,
            )
        self._cost: SamplerCost | None = None
        run.add_note(self.note())

    def _store(self, sample: DeviceSample) -> None:
        """On the sampler's thread: to the run's file first, then to the live export."""
        self._run.append_device_sample(sample)
        self._on_sample(sample)

    def note(self) -> str:
        on = [s.name for s in self.statuses if s.name is not None]
        off = [f"{s.source} not available ({s.unavailable})" for s in self.statuses
               if s.unavailable is not None]  # fmt: skip
        text = (
            f"Telemetry: every {self.spec.period_s:g} s from "
            + (", ".join(on) if on else "no source")
            + "."
        )
        if off:
            text += " " + "; ".join(off) + "."
        return text

    def start(self) -> None:
        if self._sampler is not None:
            self._sampler.start()

    def level_started(self, scenario: str, start_ns: int = 0) -> None:
        """Label the samples with the level now running (a level hook; when its workers
        start, ``start_ns``, does not matter: the label is set before they do)."""
        if self._sampler is not None:
            self._sampler.set_scenario(scenario)

    def level_ended(self) -> None:
        if self._sampler is not None:
            self._sampler.set_scenario("")

    def finish(self) -> None:
        """Stop the sampler after its read in progress, and close the sources."""
        if self._sampler is None or self._cost is not None:
            return
        self._cost = self._sampler.finish()
        for source in self._sources:
            source.close()

    def samples(self) -> list[DeviceSample]:
        """Every sample the run stored, read back from its file."""
        return RunReader(self._run.directory).accelerator_samples()

    def summary(self, samples: int, run: AcceleratorFigures | None = None) -> TelemetrySummary:
        return TelemetrySummary(self.spec.period_s, self.statuses, samples, self._cost, run)
