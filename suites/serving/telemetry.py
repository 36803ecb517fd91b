"""The accelerator sampler in a serving run ([telemetry]): open, label, stop, summarize.

The runner makes one ``Telemetry`` per run once the run is stored: it opens the spec's
sources (each is a source or "not available" with its reason, noted in the manifest) and
starts one ``DeviceSampler`` before the first level. ``level_started`` / ``level_ended``
label the samples with the level's scenario ("" between levels); ``finish`` stops the
sampler (also on the abort path) and closes the sources. Samples go to the run's
accelerator.jsonl as they are read; none is kept here: ``with_figures`` reads them back
from the file for the summary, as the soak reads the scrapes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pandas as pd

from collectors.accel_figures import accelerator_figures
from collectors.accel_records import DeviceSample, DeviceSource, SamplerCost, Unavailable
from collectors.accel_sampler import DeviceSampler
from collectors.dcgm_source import open_dcgm
from collectors.nvml_source import open_nvml
from collectors.process_source import ProcessSource
from collectors.serving_records import ScenarioSummary
from collectors.store import RunReader, RunWriter
from collectors.telemetry_records import SourceStatus, TelemetrySummary
from suites.serving.embedded.process import EmbeddedTarget
from suites.serving.telemetry_spec import TelemetrySourceName, TelemetrySpec

NOT_STARTED_BY_US = "the target is not a process this harness started"
Opener = Callable[[], DeviceSource | Unavailable]


def open_source(
    name: TelemetrySourceName, spec: TelemetrySpec, process: EmbeddedTarget | None
) -> DeviceSource | Unavailable:
    """One source of the spec, opened now; ``Unavailable`` with the reason where it cannot be."""
    if name == "nvml":
        return open_nvml()
    if name == "dcgm":
        assert spec.dcgm_url is not None  # the spec's validator requires it
        return open_dcgm(spec.dcgm_url)
    if process is None:
        return Unavailable(NOT_STARTED_BY_US)
    return ProcessSource(lambda: process.pid)  # asked at every read: a restart changes it


class Telemetry:
    """One run's sampler over every level; ``finish`` may be called more than once."""

    def __init__(
        self,
        spec: TelemetrySpec,
        process: EmbeddedTarget | None,
        run: RunWriter,
        on_sample: Callable[[DeviceSample], None] = lambda _sample: None,
    ):
        self.spec = spec
        self._run = run
        self._on_sample = on_sample
        self._sources: list[DeviceSource] = []
        statuses = []
        for name in spec.sources:
            opened = open_source(name, spec, process)
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

    def level_started(self, scenario: str) -> None:
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

    def with_figures(
        self, scenarios: dict[str, ScenarioSummary], frame: pd.DataFrame
    ) -> tuple[dict[str, ScenarioSummary], TelemetrySummary]:
        """Every scenario with its accelerator figures, and the run's telemetry summary.

        A scenario's window is the one its throughput is over (``collectors.summary``'s
        ``summarize_scenario``): the first actual send to the last completion among its
        measured requests (phase "measure", any status). Tokens and requests are its
        measured ok requests' output tokens and count, as in its output throughput.
        """
        samples = RunReader(self._run.directory).accelerator_samples()
        figured = dict(scenarios)
        for name, entry in scenarios.items():
            level = frame[frame["scenario"] == name] if len(frame) else frame
            measured = level[level["phase"] == "measure"] if len(level) else level
            if not samples or not len(measured):
                continue
            start, end = measured["send_ns"].min(), measured["done_ns"].max()
            if pd.isna(start) or pd.isna(end) or end <= start:
                continue
            start_ns, end_ns = int(start), int(end)
            figures = accelerator_figures(
                samples, start_ns, end_ns, tokens=int(entry.output_tokens), requests=entry.ok
            )
            if not isinstance(figures, Unavailable):
                figured[name] = dataclasses.replace(entry, accelerator=figures)
        summary = TelemetrySummary(self.spec.period_s, self.statuses, len(samples), self._cost)
        return figured, summary
