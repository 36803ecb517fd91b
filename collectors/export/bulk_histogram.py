"""A Prometheus histogram that takes many observations in one call.

ITL gives one sample per generated token, and prometheus_client's Histogram.observe
costs microseconds per sample (a lock and a linear bucket scan). This collector bins a
request's samples with one numpy call instead, and exposes a standard histogram family
through the registry's custom-collector interface, so the exposition is the same.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence

import numpy as np
from prometheus_client import CollectorRegistry
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector


class BulkHistogram(Collector):
    """Label-keyed cumulative histograms fed with arrays of samples."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        buckets: Sequence[float],
        registry: CollectorRegistry | None = None,
    ):
        self._name = name
        self._documentation = documentation
        self._labelnames = tuple(labelnames)
        self._bounds = np.asarray(sorted(buckets), dtype=float)
        # One count per finite bound plus +Inf; per label values.
        self._counts: dict[tuple[str, ...], np.ndarray] = {}
        self._sums: dict[tuple[str, ...], float] = {}
        self._lock = threading.Lock()
        if registry is not None:
            registry.register(self)

    def observe_many(self, label_values: tuple[str, ...], samples: np.ndarray) -> None:
        """Add every sample in ``samples`` under ``label_values`` (in labelnames order)."""
        if len(label_values) != len(self._labelnames):
            raise ValueError(f"{self._name}: expected labels {self._labelnames}")
        if not len(samples):
            return
        # Bucket i holds samples <= bounds[i] ("le"); the last slot is +Inf.
        slots = np.searchsorted(self._bounds, samples, side="left")
        added = np.bincount(slots, minlength=len(self._bounds) + 1)
        total = float(np.sum(samples))
        with self._lock:
            counts = self._counts.get(label_values)
            if counts is None:
                counts = self._counts[label_values] = np.zeros(len(self._bounds) + 1, np.int64)
                self._sums[label_values] = 0.0
            counts += added
            self._sums[label_values] += total

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self._name, self._documentation, labels=self._labelnames)
        with self._lock:
            snapshot = [(k, c.copy(), self._sums[k]) for k, c in self._counts.items()]
        bounds = [*(_format(b) for b in self._bounds), "+Inf"]
        for label_values, counts, total in snapshot:
            cumulative = np.cumsum(counts).tolist()
            family.add_metric(list(label_values), list(zip(bounds, cumulative, strict=True)), total)
        yield family

    def describe(self) -> list[HistogramMetricFamily]:
        # Registration checks names against describe(), not collect(): no samples needed.
        return [HistogramMetricFamily(self._name, self._documentation, labels=self._labelnames)]


def _format(bound: float) -> str:
    # The same text prometheus_client writes for its own histograms' "le" labels.
    from prometheus_client.utils import floatToGoString

    return floatToGoString(bound)
