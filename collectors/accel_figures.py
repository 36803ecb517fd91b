"""Accelerator figures over a time window, from the stored ``DeviceSample``s. Pure arithmetic.

A window is [start_ns, end_ns) on the run's clock (a load level, a run, a span of training
steps). A device is one (source, host, device) triple; its samples "in the window" are those
with start_ns <= t_ns < end_ns. Per device, for a field x (power, utilisation, energy, ...):

- Fewer than 2 samples of the device in the window: every figure is None (never 0).
- Edges: where the device has a reading of x before start_ns, x at start_ns is interpolated
  linearly between that last reading before the window and the first one in it, and the span
  begins at start_ns; otherwise it begins at the first reading in the window (the sampler was
  not running yet). Likewise at end_ns with the first reading at or after it. ``covered_s`` is
  that span for the device's samples, so a window the sampler did not cover whole shows it.
- Time-weighted mean of x (``utilization_mean_ratio``, ``power_mean_w``, ``cpu_mean_ratio``):
  the trapezoid integral of x over the span (edge values, then every reading in the window)
  divided by the span's length. Needs 2 readings of x in the window.
- ``utilization_max_ratio``, ``memory_peak_bytes``, ``rss_peak_bytes``: the largest reading in
  the window (no interpolation); ``memory_peak_ratio``: that reading over the same sample's
  ``memory_total_bytes``.
- ``energy_j``, ``energy_source``:
  "counter" where the device has an energy counter reading at every point used (2 readings in
  the window, and the neighbours interpolated at the edges): counter(end edge) - counter(start
  edge), the edge values interpolated as above. A counter that goes down in the span (the
  driver reloaded) is not used.
  "power integral" otherwise: the trapezoid integral of ``power_w`` over the span, in W x s.
  None where neither can be had.

Totals (``AcceleratorFigures``) are over the accelerators (sources nvml and dcgm; a process
source has no power): ``energy_j`` and ``power_mean_w`` are sums over those devices, None if
any of them lacks the figure (a partial sum would look like a saving). ``energy_source`` is
the devices' common one, or "mixed". Then, with ``tokens`` (output tokens for serving, tokens
trained on for training), ``requests`` and ``steps`` done in the window:
  energy_per_token_j = energy_j / tokens; energy_per_request_j = energy_j / requests;
  energy_per_step_j = energy_j / steps; tokens_per_j = tokens / energy_j;
each None where its denominator is 0 or missing. Give each GPU through one source only: an
NVML and a DCGM source on the same host would count its energy twice.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from moeperf.collectors.accel_records import (
    AcceleratorFigures,
    DeviceFigures,
    DeviceSample,
    EnergySource,
    Unavailable,
)

_ACCELERATORS = ("nvml", "dcgm")
Point = tuple[int, float]  # (t_ns, value)


@dataclass(frozen=True, slots=True)
class _Span:
    start_ns: int
    end_ns: int
    points: tuple[Point, ...]  # the edge values and every reading in the window, in time order


def _interpolate(p0: Point, p1: Point, t_ns: int) -> float:
    if p1[0] == p0[0]:
        return p1[1]
    return p0[1] + (p1[1] - p0[1]) * (t_ns - p0[0]) / (p1[0] - p0[0])


def span(points: Sequence[Point], start_ns: int, end_ns: int) -> _Span | None:
    """The readings of one series over [start_ns, end_ns), with values at the edges where
    readings outside the window let them be interpolated; None with fewer than 2 inside.
    ``points`` are in time order."""
    times = [t for t, _ in points]
    lo, hi = bisect.bisect_left(times, start_ns), bisect.bisect_left(times, end_ns)
    inside = list(points[lo:hi])
    if len(inside) < 2:
        return None
    first, last = inside[0], inside[-1]
    if lo > 0:
        inside.insert(0, (start_ns, _interpolate(points[lo - 1], first, start_ns)))
    if hi < len(points):
        inside.append((end_ns, _interpolate(last, points[hi], end_ns)))
    return _Span(inside[0][0], inside[-1][0], tuple(inside))


def trapezoid(points: Sequence[Point]) -> float:
    """The integral of the piecewise-linear series through ``points``, in value x seconds."""
    return sum((t1 - t0) / 1e9 * (x0 + x1) / 2 for (t0, x0), (t1, x1) in itertools.pairwise(points))


def _series(
    samples: Sequence[DeviceSample], get: Callable[[DeviceSample], float | None]
) -> list[Point]:
    return [(s.t_ns, float(x)) for s in samples if (x := get(s)) is not None]


def _mean(
    samples: Sequence[DeviceSample],
    get: Callable[[DeviceSample], float | None],
    start_ns: int,
    end_ns: int,
) -> float | None:
    sp = span(_series(samples, get), start_ns, end_ns)
    if sp is None or sp.end_ns == sp.start_ns:
        return None
    return trapezoid(sp.points) / ((sp.end_ns - sp.start_ns) / 1e9)


def _counter_energy(samples: Sequence[DeviceSample], start_ns: int, end_ns: int) -> float | None:
    energy = [(s.t_ns, s.energy_j) for s in samples]
    times = [t for t, _ in energy]
    lo, hi = bisect.bisect_left(times, start_ns), bisect.bisect_left(times, end_ns)
    # Every reading used, the edges' neighbours included, must carry the counter.
    used = energy[max(lo - 1, 0) : hi + 1]
    if hi - lo < 2 or any(e is None for _, e in used):
        return None
    points = [(t, float(e)) for t, e in used if e is not None]
    if any(e1 < e0 for (_, e0), (_, e1) in itertools.pairwise(points)):
        return None  # the counter was reset (driver reload)
    sp = span(points, start_ns, end_ns)
    return None if sp is None else sp.points[-1][1] - sp.points[0][1]


def _energy(
    samples: Sequence[DeviceSample], start_ns: int, end_ns: int
) -> tuple[float | None, EnergySource | None]:
    counter = _counter_energy(samples, start_ns, end_ns)
    if counter is not None:
        return counter, "counter"
    sp = span(_series(samples, lambda s: s.power_w), start_ns, end_ns)
    if sp is None:
        return None, None
    return trapezoid(sp.points), "power integral"


def _peak(
    inside: Sequence[DeviceSample], get: Callable[[DeviceSample], int | None]
) -> DeviceSample | None:
    with_value = [s for s in inside if get(s) is not None]
    return max(with_value, key=lambda s: get(s) or 0) if with_value else None


def device_figures(samples: Sequence[DeviceSample], start_ns: int, end_ns: int) -> DeviceFigures:
    """One device's figures over the window; ``samples`` are that device's, in time order."""
    first = samples[0]
    inside = [s for s in samples if start_ns <= s.t_ns < end_ns]
    none = DeviceFigures(
        first.source, first.host, first.device, first.name, len(inside), None, None, None,
        None, None, None, None, None,
    )  # fmt: skip
    if len(inside) < 2:
        return none
    covered = span([(s.t_ns, 0.0) for s in samples], start_ns, end_ns)
    utilization = [s.utilization_ratio for s in inside if s.utilization_ratio is not None]
    memory = _peak(inside, lambda s: s.memory_used_bytes)
    rss = _peak(inside, lambda s: s.rss_bytes)
    energy_j, energy_source = _energy(samples, start_ns, end_ns)
    memory_ratio = None
    if memory is not None and memory.memory_used_bytes is not None and memory.memory_total_bytes:
        memory_ratio = memory.memory_used_bytes / memory.memory_total_bytes
    return DeviceFigures(
        source=first.source,
        host=first.host,
        device=first.device,
        name=first.name,
        samples=len(inside),
        covered_s=None if covered is None else (covered.end_ns - covered.start_ns) / 1e9,
        utilization_mean_ratio=_mean(samples, lambda s: s.utilization_ratio, start_ns, end_ns),
        utilization_max_ratio=max(utilization) if utilization else None,
        memory_peak_bytes=None if memory is None else memory.memory_used_bytes,
        memory_peak_ratio=memory_ratio,
        power_mean_w=_mean(samples, lambda s: s.power_w, start_ns, end_ns),
        energy_j=energy_j,
        energy_source=energy_source,
        rss_peak_bytes=None if rss is None else rss.rss_bytes,
        cpu_mean_ratio=_mean(samples, lambda s: s.cpu_ratio, start_ns, end_ns),
    )


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def accelerator_figures(
    samples: Sequence[DeviceSample],
    start_ns: int,
    end_ns: int,
    *,
    tokens: int | None = None,
    requests: int | None = None,
    steps: int | None = None,
) -> AcceleratorFigures | Unavailable:
    """Every device's figures over [start_ns, end_ns) and the totals; ``Unavailable`` when no
    device has a sample in the window.

    Pass the run's samples, not only the window's: the readings just outside it give the
    values at its edges. Every accelerator seen is reported, one without samples in this
    window with its figures None (then the totals are None too: a GPU that went missing
    is not a GPU that drew nothing). A process without samples in the window is left out:
    it was not running then (a target restarted since, or before it).
    """
    by_device: dict[tuple[str, str, str], list[DeviceSample]] = {}
    for s in sorted(samples, key=lambda s: s.t_ns):  # stable: equal times keep their order
        by_device.setdefault((s.source, s.host, s.device), []).append(s)
    every = (device_figures(by_device[key], start_ns, end_ns) for key in sorted(by_device))
    devices = tuple(d for d in every if d.samples or d.source in _ACCELERATORS)
    if not any(d.samples for d in devices):
        return Unavailable(f"no accelerator sample between {start_ns} and {end_ns} ns")
    accelerators = [d for d in devices if d.source in _ACCELERATORS]
    energies = [d.energy_j for d in accelerators]
    powers = [d.power_mean_w for d in accelerators]
    energy = None if not energies or None in energies else sum(e for e in energies if e is not None)
    power = None if not powers or None in powers else sum(p for p in powers if p is not None)
    sources = {d.energy_source for d in accelerators}
    energy_source: EnergySource | Literal["mixed"] | None = None
    if energy is not None:
        energy_source = sources.pop() if len(sources) == 1 else "mixed"
    return AcceleratorFigures(
        start_ns=start_ns,
        end_ns=end_ns,
        devices=devices,
        power_mean_w=power,
        energy_j=energy,
        energy_source=energy_source,
        tokens=tokens,
        requests=requests,
        steps=steps,
        energy_per_token_j=_ratio(energy, tokens),
        energy_per_request_j=_ratio(energy, requests),
        energy_per_step_j=_ratio(energy, steps),
        tokens_per_j=_ratio(tokens, energy),
    )


class StepSpan(Protocol):
    """One training step as the trainer timed it (``collectors.records.StepRecord`` is one):
    on the run's clock, and the tokens it trained on."""

    @property
    def start_ns(self) -> int: ...

    @property
    def end_ns(self) -> int: ...

    @property
    def tokens(self) -> int: ...


def training_figures(
    samples: Sequence[DeviceSample], steps: Sequence[StepSpan]
) -> AcceleratorFigures | Unavailable:
    """Figures over the window from the first step's start to the last one's end, with
    energy per step and per token. ``steps``: one entry per optimizer step (the caller
    merges ranks and micro-batches)."""
    if not steps:
        return Unavailable("no training step")
    start_ns = min(s.start_ns for s in steps)
    end_ns = max(s.end_ns for s in steps)
    tokens = sum(s.tokens for s in steps)
    return accelerator_figures(samples, start_ns, end_ns, tokens=tokens, steps=len(steps))
