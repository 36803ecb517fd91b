"""A target's own /metrics, read through dialect adapters into canonical series.

Pure: text in, ``TargetSample`` records out; the HTTP side is ``suites.serving.observe.scraper``.
The text is parsed by prometheus_client's parser, which names a typed counter family
without its ``_total``; an untyped one keeps it, so adapters strip it themselves.

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
    DIALECTS,
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
    for family in families:
        if family.type not in ("histogram", "summary", "gaugehistogram", "info"):
            by_name.setdefault(_base_name(family), family)
    out: list[TargetSample] = []
    for series in spec.series:
        source = next((by_name[s] for s in series.sources if s in by_name), None)
        if source is not None:
            out += _read_family(source, series, spec.shard_labels)
    return out


def _read_family(
    family: Family, series: SeriesMap, shard_labels: tuple[str, ...]
) -> list[TargetSample]:
    kind: SampleKind = "counter" if series.metric.kind == "counter" else "gauge"
    wanted = {family.name, _base_name(family) + "_total"} if kind == "counter" else {family.name}
    only = dict(series.only)
    kept: dict[tuple[Labels, Labels], tuple[Labels, float]] = {}  # -> (shard, value)
    for sample in family.samples:
        if sample.name not in wanted or not math.isfinite(sample.value):
            continue
        labels = sample.labels
        if any(labels.get(k) not in allowed for k, allowed in only.items()):
            continue
        canonical = tuple(sorted((k, labels.get(k, "")) for k in series.labels))
        rest = {k: v for k, v in labels.items() if k not in series.labels}
        shard = tuple(sorted((k, rest.pop(k)) for k in shard_labels if k in rest))
        key = (canonical, tuple(sorted(rest.items())))
        if key not in kept or _shard_order(shard) < _shard_order(kept[key][0]):
            kept[key] = (shard, float(sample.value))
    name = series.metric.name
    return [TargetSample(name, c, v, kind, source) for (c, source), (_, v) in kept.items()]


def _shard_order(shard: Labels) -> tuple:
    return tuple((k, int(v) if v.isdigit() else math.inf, v) for k, v in shard)


def read_exposition(text: str) -> tuple[DialectName, list[TargetSample]]:
    """Parse ``text``, detect its dialect, and return its canonical per-copy samples."""
    families = parse_exposition(text)
    dialect = detect_dialect(families)
    return dialect, canonical_samples(families, dialect)
