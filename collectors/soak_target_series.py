"""The target's scraped series (server_metrics.jsonl) read over a soak's windows.

Gauges are read from the scrapes taken inside a window; counters as the increase of their
``run_value`` (the scraper's increase since the run began, restarts handled) from the
last scrape at or before a window's start to the last at or before its end.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from moeperf.collectors.export import metric_names as mn


class TargetSeries:
    """The target's scraped series over time, read at window edges."""

    def __init__(self, scrapes: Sequence[Mapping[str, Any]]):
        usable = [s for s in scrapes if s.get("available") and isinstance(s.get("t_ns"), int)]
        self._scrapes = sorted(usable, key=lambda s: s["t_ns"])

    def _series(self, name: str, scrape: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        return [s for s in scrape.get("series", []) if s.get("name") == name]

    def gauge_values(self, name: str, lo_ns: int, hi_ns: int) -> list[float]:
        values = []
        for scrape in self._scrapes:
            if lo_ns <= scrape["t_ns"] < hi_ns:
                found = self._series(name, scrape)
                if found:
                    values.append(float(found[0]["value"]))
        return values

    def gauge_mean(self, name: str, lo_ns: int, hi_ns: int) -> float | None:
        values = self.gauge_values(name, lo_ns, hi_ns)
        return float(np.mean(values)) if values else None

    def _at(self, name: str, t_ns: int) -> dict[tuple, float] | None:
        """Each labelled series' run increase as of the last scrape at or before t_ns."""
        before = [s for s in self._scrapes if s["t_ns"] <= t_ns]
        if not before:
            return None
        found = self._series(name, before[-1])
        if not found:
            return None
        return {tuple(sorted(s.get("labels", {}).items())): float(s["run_value"]) for s in found}

    def _increase_by_series(self, name: str, lo_ns: int, hi_ns: int) -> dict[tuple, float] | None:
        start, end = self._at(name, lo_ns), self._at(name, hi_ns)
        if end is None:
            return None
        start = start or {}
        return {key: value - start.get(key, 0.0) for key, value in end.items()}

    def increase(self, name: str, lo_ns: int, hi_ns: int) -> float | None:
        by_series = self._increase_by_series(name, lo_ns, hi_ns)
        return None if by_series is None else float(sum(by_series.values()))

    def expert_drift(
        self, first_ns: tuple[int, int], last_ns: tuple[int, int]
    ) -> tuple[float, ...] | None:
        """Per MoE layer, the total variation distance between the expert-load shares of
        the first and the last window: half the sum over experts of |share first - share
        last| (0: the same shares; 1: no expert in common). None: no expert counters, or a
        window in which a layer routed nothing."""
        name = mn.TARGET_EXPERT_TOKENS.name
        first = self._increase_by_series(name, *first_ns)
        last = self._increase_by_series(name, *last_ns)
        if not first or not last:
            return None
        out = []
        for layer in sorted({dict(k).get("layer", "") for k in last}, key=_layer_order):
            keys = sorted(k for k in last if dict(k).get("layer", "") == layer)
            a = np.array([first.get(k, 0.0) for k in keys])
            b = np.array([last[k] for k in keys])
            if a.sum() <= 0 or b.sum() <= 0:
                return None
            out.append(float(0.5 * np.abs(a / a.sum() - b / b.sum()).sum()))
        return tuple(out)


def _layer_order(layer: str) -> tuple[int, str]:
    return (int(layer), layer) if layer.isdigit() else (1 << 30, layer)
