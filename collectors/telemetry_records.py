"""What a run's summary says about its accelerator sampler: which sources were on, which were
not available and why, and what the sampling cost (``ServingSummary.telemetry``).

The figures themselves are per level (``ScenarioSummary.accelerator``, an
``AcceleratorFigures`` from ``collectors.accel_figures``).
"""

from __future__ import annotations

from dataclasses import dataclass

from moeperf.collectors.accel_records import AcceleratorFigures, SamplerCost, SourceName


@dataclass(frozen=True, slots=True)
class SourceStatus:
    """One source the spec asked for: on (``name``, as ``DeviceSource.name`` says it), or
    not available (``unavailable``, the reason, shown to the user as is)."""

    source: SourceName
    name: str | None = None
    unavailable: str | None = None


@dataclass(frozen=True, slots=True)
class TelemetrySummary:
    """The sampler of a run. ``cost`` is None when no source was available (nothing ran);
    ``samples``: how many the run stored; ``run``: the figures over the whole run."""

    period_s: float
    sources: tuple[SourceStatus, ...]
    samples: int
    cost: SamplerCost | None
    # The whole run: serving, from the first measured send of any level to the last
    # completion, with every level's measured ok output tokens and requests (the gaps
    # between levels and their warm-ups included: what the run cost); training, from the
    # first step's start to the last one's end, with every completed step. None: no
    # figure could be had.
    run: AcceleratorFigures | None = None

    def unavailable_text(self) -> str:
        """Why there are no accelerator figures: every source's reason, in spec order."""
        reasons = [f"{s.source}: {s.unavailable}" for s in self.sources if s.unavailable]
        return "; ".join(reasons) or "no source was read"
