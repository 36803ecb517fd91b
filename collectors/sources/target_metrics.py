"""A target's own /metrics, read through dialect adapters into canonical series.

Pure: text in, ``TargetSample`` records out; the HTTP side is ``suites.serving.observe.scraper``.
The text is parsed by prometheus_client's parser, which names a typed counter family
without its ``_total``; an untyped one keeps it, so adapters strip it themselves. A
histogram the dialect maps becomes counters (each bucket's cumulative count with its
``le``, the count and the sum), an info-style gauge the value of one of its labels.

The dialects (the target's names -> canonical series) are ``target_dialects.py``; the
counters' increases over a run and a window are ``counter_window.py``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from prometheus_client.metrics_core import Metric as Family
from prometheus_client.parser import text_string_to_metric_families

from moeperf.collectors.errors import CollectorError
from moeperf.collectors.sources.target_dialects import (
    BUCKET,
    COUNT,
    DIALECTS,
    SUM,
    Dialect,
    DialectName,
    SeriesMap,
)

SampleKind = Literal["gauge", "counter"]
Labels = tuple[tuple[str, str], ...]  # sorted (name, value) pairs


class ExpositionError(CollectorError):
    """The text is not in the Prometheus exposition format."""


@dataclass(frozen=True, slots=True)
class TargetSample:
    """One canonical series as read from one copy (``source``) inside the target.

    ``labels`` are canonical labels only (layer, expert); ``source`` holds the target's
    own remaining labels (engine, model_name, dp_rank, ...) so counters are windowed per
    copy before copies are combined (a restart of one engine is then seen as its reset).
    """

    name: str  # a canonical Metric.name
    labels: Labels
    value: float
    kind: SampleKind
    source: Labels = ()


def parse_exposition(text: str) -> list[Family]:
    """Families of a Prometheus text exposition; ``ExpositionError`` if it is not one."""
    try:
        return list(text_string_to_metric_families(text))
    except (ValueError, TypeError, IndexError) as exc:
        raise ExpositionError(f"not Prometheus text exposition: {exc}") from None


def _base_name(family: Family) -> str:
    name = family.name
    if family.type in ("counter", "unknown") and name.endswith("_total"):
        return name[: -len("_total")]
    return name


def detect_dialect(families: Iterable[Family]) -> DialectName:
    names = [f.name for f in families]
    for dialect in DIALECTS:
        if any(n.startswith(dialect.prefix) for n in names):
            return dialect.name
    return "unknown"


def _dialect(name: DialectName) -> Dialect | None:
    return next((d for d in DIALECTS if d.name == name), None)


def canonical_samples(
    families: Sequence[Family], dialect: DialectName | None = None
) -> list[TargetSample]:
    """Per-copy canonical samples of ``families`` (dialect detected when not given)."""
    spec = _dialect(dialect or detect_dialect(families))
    if spec is None:
        return []
    by_name: dict[str, Family] = {}
    histograms: dict[str, Family] = {}
    for family in families:
        if family.type == "histogram":
            histograms.setdefault(family.name, family)
        elif family.type not in ("summary", "gaugehistogram", "info"):
            by_name.setdefault(_base_name(family), family)
    out: list[TargetSample] = []
    for series in spec.series:
        found = histograms if series.metric.kind == "histogram" else by_name
        source = next((found[s] for s in series.sources if s in found), None)
        if source is not None:
            out += _read_family(source, series, spec.shard_labels)
    return out


def _read_family(
    family: Family, series: SeriesMap, shard_labels: tuple[str, ...]
) -> list[TargetSample]:
    if series.metric.kind == "histogram":
        return _read_histogram(family, series, shard_labels)
    kind: SampleKind = "counter" if series.metric.kind == "counter" else "gauge"
    wanted = {family.name, _base_name(family) + "_total"} if kind == "counter" else {family.name}
    kept = _Kept(series.labels, shard_labels)
    for sample in family.samples:
        if sample.name not in wanted or not _accepted(sample.labels, series.only):
            continue
        value = sample.value
        if series.value_label is not None:
            value = _number(sample.labels.get(series.value_label))
        if math.isfinite(value):
            kept.add(series.metric.name, sample.labels, value)
    return kept.samples(kind)


def _read_histogram(
    family: Family, series: SeriesMap, shard_labels: tuple[str, ...]
) -> list[TargetSample]:
    """Counters of a histogram: ``<metric>_bucket`` per ``le`` (its cumulative count),
    ``<metric>_count`` and ``<metric>_sum``."""
    name = series.metric.name
    parts = {family.name + p: name + p for p in (BUCKET, COUNT, SUM)}
    buckets = _Kept((*series.labels, "le"), shard_labels)
    totals = _Kept(series.labels, shard_labels)
    for sample in family.samples:
        part = parts.get(sample.name)
        if part is None or not _accepted(sample.labels, series.only):
            continue
        if not math.isfinite(sample.value):
            continue
        if part != name + BUCKET:
            totals.add(part, sample.labels, sample.value)
            continue
        le = _number(sample.labels.get("le"))
        if not math.isnan(le):
            buckets.add(part, {**sample.labels, "le": _le_text(le)}, sample.value)
    return buckets.samples("counter") + totals.samples("counter")


def _le_text(bound: float) -> str:
    """A bucket's upper bound as its ``le`` label: "+Inf", else the float's shortest text
    (one text per bound, whatever the target wrote: "0.5", "5e-01")."""
    return "+Inf" if bound == math.inf else repr(float(bound))


def _number(text: str | None) -> float:
    """A label's number; NaN where it holds none ("None", "", absent)."""
    try:
        return float(text) if text is not None else math.nan
    except ValueError:
        return math.nan


def _accepted(labels: dict[str, str], only: tuple[tuple[str, tuple[str, ...]], ...]) -> bool:
    return all(labels.get(k) in allowed for k, allowed in only)


class _Kept:
    """Samples by (name, canonical labels, copy); of the copies of one shard, the lowest."""

    def __init__(self, canonical: tuple[str, ...], shard_labels: tuple[str, ...]) -> None:
        self._canonical = canonical
        self._shard_labels = shard_labels
        self._kept: dict[tuple[str, Labels, Labels], tuple[Labels, float]] = {}

    def add(self, name: str, labels: dict[str, str], value: float) -> None:
        canonical = tuple(sorted((k, labels.get(k, "")) for k in self._canonical))
        rest = {k: v for k, v in labels.items() if k not in self._canonical}
        shard = tuple(sorted((k, rest.pop(k)) for k in self._shard_labels if k in rest))
        key = (name, canonical, tuple(sorted(rest.items())))
        if key not in self._kept or _shard_order(shard) < _shard_order(self._kept[key][0]):
            self._kept[key] = (shard, float(value))

    def samples(self, kind: SampleKind) -> list[TargetSample]:
        return [
            TargetSample(name, canonical, value, kind, source)
            for (name, canonical, source), (_, value) in self._kept.items()
        ]


def _shard_order(shard: Labels) -> tuple:
    return tuple((k, int(v) if v.isdigit() else math.inf, v) for k, v in shard)


def read_exposition(text: str) -> tuple[DialectName, list[TargetSample]]:
    """Parse ``text``, detect its dialect, and return its canonical per-copy samples."""
    families = parse_exposition(text)
    dialect = detect_dialect(families)
    return dialect, canonical_samples(families, dialect)
