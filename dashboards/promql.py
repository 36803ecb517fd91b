"""PromQL the dashboards are made of: every selector filters on the template variables.

A selector matches each dashboard variable the metric carries as a label (`suite=~"$suite"`),
so picking a scenario never hides a series that has no scenario label (the harness-health
gauges). Rates and increases always use `$__rate_interval`, which Grafana sizes from the
datasource's scrape interval. Metric names come from `collectors.export.metric_names` only.
"""

from __future__ import annotations

from collections.abc import Sequence

from moeperf.collectors.export.metric_names import Metric

RATE_INTERVAL = "$__rate_interval"
# Every template variable a query may filter on; each dashboard defines the ones it uses.
FILTER_LABELS = ("suite", "target", "scenario", "policy")
# The quantiles latency and step-time panels plot.
QUANTILES = (0.5, 0.9, 0.99)


def selector(metric: Metric, sample: str | None = None, extra: str = "") -> str:
    """`name{suite=~"$suite", ...}` for the variables the metric has as labels.

    `sample` overrides the sample name (a histogram's `_bucket`); `extra` adds one more
    matcher, such as `status!="ok"`.
    """
    name = sample or metric.sample_name
    matchers = [f'{label}=~"${label}"' for label in FILTER_LABELS if label in metric.labels]
    if extra:
        matchers.append(extra)
    return f"{name}{{{', '.join(matchers)}}}"


def _by(labels: Sequence[str]) -> str:
    return f"by ({', '.join(labels)}) " if labels else ""


def _check_labels(metric: Metric, by: Sequence[str]) -> None:
    unknown = [label for label in by if label not in (*metric.labels, "le")]
    if unknown:
        raise ValueError(f"{metric.name} has no label(s) {unknown}; its labels: {metric.labels}")


def rate(metric: Metric, by: Sequence[str], extra: str = "") -> str:
    """Per-second rate of a counter, summed by `by`."""
    if metric.kind != "counter":
        raise ValueError(f"rate() of {metric.name}, a {metric.kind}")
    _check_labels(metric, by)
    return f"sum {_by(by)}(rate({selector(metric, extra=extra)}[{RATE_INTERVAL}]))"


def increase(metric: Metric, by: Sequence[str]) -> str:
    """Counter increase over each rate interval, summed by `by` (events such as OOMs)."""
    if metric.kind != "counter":
        raise ValueError(f"increase() of {metric.name}, a {metric.kind}")
    _check_labels(metric, by)
    return f"sum {_by(by)}(increase({selector(metric)}[{RATE_INTERVAL}]))"


def quantile(q: float, metric: Metric, by: Sequence[str]) -> str:
    """`histogram_quantile` over the buckets' rates: an estimate from buckets, for live views.

    Reports compute percentiles from raw samples; these panels only show trends.
    """
    if metric.kind != "histogram":
        raise ValueError(f"quantile() of {metric.name}, a {metric.kind}")
    _check_labels(metric, by)
    buckets = selector(metric, sample=metric.name + "_bucket")
    return f"histogram_quantile({q}, sum {_by(('le', *by))}(rate({buckets}[{RATE_INTERVAL}])))"


def gauge(metric: Metric, by: Sequence[str]) -> str:
    """The latest value, max by `by`: a series both scraped live and pushed to the
    Pushgateway (same labels, other job) is not counted twice."""
    _check_labels(metric, by)
    return f"max {_by(by)}({selector(metric)})"


def ratio(numerator: str, denominator: str) -> str:
    """`numerator / denominator`; both must aggregate to the same labels."""
    return f"{numerator} / {denominator}"


def or_zero(expr: str, reference: str) -> str:
    """`expr`, or 0 for every series of `reference` it lacks.

    A labelled counter has no series until its first increment, so "no errors yet" or "no
    request met the SLO" would otherwise be an empty panel instead of a visible 0.
    """
    return f"({expr} or {reference} * 0)"
