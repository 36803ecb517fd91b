"""Counter increases over a run and over a window, with a target's copies combined.

Apart from ``target_metrics.py`` (one scrape's text into per-copy samples): this keeps
state across scrapes, to turn cumulative counters into what a run or a load level added.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from moeperf.collectors.export import metric_names as mn
from moeperf.collectors.sources.target_dialects import TARGET_KV_BLOCK_TOKENS
from moeperf.collectors.sources.target_metrics import Labels, SampleKind, TargetSample

# Gauges whose copies (engines, data-parallel ranks) are averaged rather than summed: ratios,
# and the block size (every engine's blocks hold as many tokens; their blocks add up).
_MEAN_OF_COPIES = frozenset(
    m.name
    for m in (
        mn.TARGET_KV_USAGE,
        mn.TARGET_PREFIX_HIT_RATIO,
        mn.TARGET_ACCEPT_LENGTH,
        TARGET_KV_BLOCK_TOKENS,
    )
)


@dataclass(frozen=True, slots=True)
class WindowedSample:
    """A canonical series with its copies combined, as of the latest scrape.

    Counters: ``value`` is the target's cumulative count, ``window_value`` and
    ``run_value`` its increase since the window / the run began. Gauges: all three are
    the latest value.
    """

    name: str
    labels: Labels
    kind: SampleKind
    value: float
    window_value: float
    run_value: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "labels": dict(self.labels),
            "kind": self.kind,
            "value": self.value,
            "window_value": self.window_value,
            "run_value": self.run_value,
        }


class CounterWindow:
    """Counter increases over a run and over the current window (a load level, an arm).

    Like Prometheus' ``increase()``: a value lower than the last means the target
    restarted, and the new value counts in full. The first scrape of a run is its
    baseline (what the target counted before the run is not the run's); a copy that
    first appears later counts from zero. ``start_window()`` starts a new window from the
    latest values; a caller scrapes right before it so the boundary is exact.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget everything: the next scrape is a new run's baseline."""
        self._last: dict[tuple[str, Labels, Labels], float] = {}
        self._run: dict[tuple[str, Labels, Labels], float] = {}
        self._window: dict[tuple[str, Labels, Labels], float] = {}
        self._primed = False

    def start_window(self) -> None:
        self._window = {}

    def observe(self, samples: Iterable[TargetSample]) -> list[WindowedSample]:
        combined: dict[tuple[str, Labels], list[tuple[TargetSample, float, float]]] = {}
        for s in samples:
            key = (s.name, s.labels, s.source)
            increase = 0.0
            if s.kind == "counter":
                last = self._last.get(key)
                if last is None:
                    increase = s.value if self._primed else 0.0
                else:
                    increase = s.value - last if s.value >= last else s.value
                self._last[key] = s.value
                self._run[key] = self._run.get(key, 0.0) + increase
                self._window[key] = self._window.get(key, 0.0) + increase
            entry = (s, self._window.get(key, 0.0), self._run.get(key, 0.0))
            combined.setdefault((s.name, s.labels), []).append(entry)
        self._primed = True
        return [_combine(name, labels, copies) for (name, labels), copies in combined.items()]


def _combine(
    name: str, labels: Labels, copies: list[tuple[TargetSample, float, float]]
) -> WindowedSample:
    kind = copies[0][0].kind
    value = sum(c[0].value for c in copies)
    if kind == "gauge":
        if name in _MEAN_OF_COPIES:
            value /= len(copies)
        return WindowedSample(name, labels, kind, value, value, value)
    window = sum(c[1] for c in copies)
    run = sum(c[2] for c in copies)
    return WindowedSample(name, labels, kind, value, window, run)


def combine_copies(samples: Iterable[TargetSample]) -> dict[tuple[str, Labels], float]:
    """Latest values with copies combined (summed, or averaged for ratios), by series."""
    return {(w.name, w.labels): w.value for w in CounterWindow().observe(samples)}
