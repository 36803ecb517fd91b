"""Accelerator telemetry as records: the samples a run stores, the sampler's cost, the figures.

A ``DeviceSample`` is one reading of one device (a GPU through NVML or a DCGM exporter, or a
local target's process tree), stored as it is taken (accelerator.jsonl, through the run's
writer). Every field a source cannot read is None, never 0: a GPU without an energy counter
has ``energy_j=None``, and the process source has no power at all.

The figures over a window (``DeviceFigures``, ``AcceleratorFigures``) are computed by
``collectors.accel_figures``, whose docstring defines each of them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from moeperf.collectors.schema import SCHEMA_VERSION

SourceName = Literal["nvml", "dcgm", "process"]
EnergySource = Literal["counter", "power integral"]


@dataclass(frozen=True, slots=True)
class Unavailable:
    """A source or a figure that cannot be had, and why (shown to the user as is)."""

    reason: str


@dataclass(frozen=True, slots=True)
class DeviceSample:
    """One reading of one device, in base units (ratios 0-1, bytes, W, J, Hz, degrees C).

    ``t_ns``: the run's clock (ns from its anchor), taken just before the source is read.
    ``device``: a stable id within ``host``: "gpu0" (NVML, by index), "host:gpu0" (DCGM; a MIG
    instance adds "/mig<GPU_I_ID>"), "pid:<pid>" (process: the target's root process).
    ``energy_j``: the device's cumulative energy counter (NVML: since the driver loaded; DCGM:
    since boot), not an increase; None where the device has none.
    ``throttle_reasons``: what is holding the clocks down (names as in NVML's clock event
    reasons: "sw_power_cap", "hw_slowdown", ...); () when nothing is, None when unknown.
    ``engine_active_ratio``: DCGM's ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` (time the graphics
    engine was busy), finer than ``utilization_ratio`` (time any kernel ran); DCGM only.
    ``cpu_ratio``: process source: CPU seconds of the tree over wall seconds since the last
    read (above 1 on several cores).
    """

    # When the source was read (ns from the run's anchor).
    t_ns: int
    # Which source read it: "nvml", "dcgm" or "process".
    source: SourceName
    # A stable id within host: "gpu0" (NVML), "host:gpu0" (DCGM), "pid:<pid>" (process).
    device: str
    # The device's host: this host's name (NVML, process); DCGM: the exporter's hostname
    # label, else its URL's host.
    host: str
    # The load level (or training scenario) running when it was read; "" between them.
    scenario: str
    # What the source read; a field it cannot read stays None. The GPU's model name, or
    # the root process's name.
    name: str | None = None
    # Share of the time a kernel ran on the GPU (0-1).
    utilization_ratio: float | None = None
    # GPU memory in use.
    memory_used_bytes: int | None = None
    # GPU memory in all.
    memory_total_bytes: int | None = None
    # Power draw.
    power_w: float | None = None
    # The device's cumulative energy counter (not an increase).
    energy_j: float | None = None
    # SM clock.
    sm_clock_hz: int | None = None
    # Memory clock.
    memory_clock_hz: int | None = None
    # GPU temperature.
    temperature_c: float | None = None
    # What holds the clocks down (NVML's clock event reason names); (): nothing.
    throttle_reasons: tuple[str, ...] | None = None
    # process: the tree's CPU seconds over wall seconds since the last read (above 1 on
    # several cores).
    cpu_ratio: float | None = None
    # process: resident memory of the process tree, summed.
    rss_bytes: int | None = None
    # The GPU's UUID (NVML, DCGM).
    uuid: str | None = None
    # DCGM only: share of the time the graphics engine was busy (0-1).
    engine_active_ratio: float | None = None
    # The record layout's version (collectors/schema.py); readers refuse one they do not know.
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class DeviceSource(Protocol):
    """What the sampler reads: one source (NVML, one DCGM exporter, one process tree).

    ``read`` returns a sample per device it sees, stamped ``t_ns`` and labelled ``scenario``;
    it raises when the whole read failed (the sampler counts it under ``name`` and goes on).
    A field that failed alone is None in its sample.
    """

    @property
    def name(self) -> str: ...  # e.g. "nvml", "dcgm http://node1:9400/metrics", "process 1234"

    def read(self, t_ns: int, scenario: str) -> Sequence[DeviceSample]: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class SourceErrors:
    source: str  # DeviceSource.name
    count: int
    last: str  # the last error, "Type: message"


@dataclass(frozen=True, slots=True)
class SamplerCost:
    """What the sampler itself cost over its run (``collectors.sources.accel_sampler``).

    A read is one tick: every source read once and its samples stored. ``read_*_s`` are wall
    seconds per read; ``cpu_s`` is the sampler thread's CPU time (``time.thread_time``) over
    all reads, and ``cpu_ratio`` that over ``run_s`` (start to finish): the share of one core
    the sampler took. ``ticks_missed``: ticks skipped because a read overran its period.
    """

    period_s: float
    run_s: float
    reads: int
    ticks_missed: int
    read_mean_s: float | None  # None: no read done
    read_max_s: float | None
    cpu_s: float
    cpu_ratio: float | None  # None: run_s is 0
    errors: tuple[SourceErrors, ...]


@dataclass(frozen=True, slots=True)
class DeviceFigures:
    """One device over one window (definitions: ``collectors.accel_figures``)."""

    source: SourceName
    host: str
    device: str
    name: str | None
    samples: int  # in the window
    covered_s: float | None  # the span the time-weighted figures cover (<= the window)
    utilization_mean_ratio: float | None
    utilization_max_ratio: float | None
    memory_peak_bytes: int | None
    memory_peak_ratio: float | None  # of the device's total, at the peak's sample
    power_mean_w: float | None
    energy_j: float | None
    energy_source: EnergySource | None
    rss_peak_bytes: int | None = None  # process source
    cpu_mean_ratio: float | None = None  # process source


@dataclass(frozen=True, slots=True)
class AcceleratorFigures:
    """All devices over one window, with the totals over the accelerators (nvml, dcgm).

    ``tokens`` are the output tokens (serving) or the tokens trained on (training) in the
    window; ``requests`` and ``steps`` are None where they do not apply.
    """

    start_ns: int
    end_ns: int
    devices: tuple[DeviceFigures, ...]
    power_mean_w: float | None
    energy_j: float | None
    energy_source: EnergySource | Literal["mixed"] | None
    tokens: int | None
    requests: int | None
    steps: int | None
    energy_per_token_j: float | None
    energy_per_request_j: float | None
    energy_per_step_j: float | None
    tokens_per_j: float | None
