"""reference/prometheus-metrics.md: every metric family moeperf exports, with its labels."""

from __future__ import annotations

from moeperf.collectors.export import metric_names as m
from moeperf.docs.markdown import GENERATED, code, paragraphs, table

_GROUPS = (
    ("Serving: what the harness measured", m.SERVING_METRICS),
    ("Serving: what the target reported (scraped from its /metrics)", m.TARGET_METRICS),
    ("Training", m.TRAINING_METRICS),
    ("Accelerators and the target's process", m.DEVICE_METRICS),
    ("Pushgateway", (m.LAST_SUCCESS,)),
)


def page() -> str:
    parts = ["# Prometheus metrics\n\n", GENERATED, "\n", paragraphs(m.__doc__)]
    for title, metrics in _GROUPS:
        rows = [
            (code(metric.sample_name), metric.kind, metric.unit,
             ", ".join(code(label) for label in metric.labels), metric.help)
            for metric in metrics
        ]  # fmt: skip
        parts.append(f"\n## {title}\n\n")
        parts.append(table(("series", "type", "unit", "labels", "meaning"), rows))
    missing = set(m.ALL_METRICS) - {x for _, group in _GROUPS for x in group}
    assert not missing, f"metric families on no page: {sorted(x.name for x in missing)}"
    return "".join(parts)
