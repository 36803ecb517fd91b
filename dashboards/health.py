"""The harness-health row: is the load generator, not the target, the bottleneck? When did a
run last complete?"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as dashboard_b

from moeperf.collectors.export import metric_names as m

from .panels import Query, row, stat_panel, timeseries_panel, unit_of
from .promql import gauge


def harness_health_row(d: dashboard_b.Dashboard, client: bool) -> None:
    """The harness watching itself; `client` adds the load workers' panels (serving only)."""
    d.with_row(row("Harness health"))
    if client:
        d.with_panel(
            timeseries_panel(
                "Event-loop lag p99",
                unit_of(m.LOOP_LAG),
                [Query(gauge(m.LOOP_LAG, ("target", "worker")), "{{target}} worker {{worker}}")],
                m.LOOP_LAG.help,
                width=8,
            )
        )
        d.with_panel(
            timeseries_panel(
                "Load-worker CPU",
                unit_of(m.CLIENT_CPU),
                [Query(gauge(m.CLIENT_CPU, ("target", "worker")), "{{target}} worker {{worker}}")],
                m.CLIENT_CPU.help,
                width=8,
            )
        )
        d.with_panel(
            stat_panel(
                "Client-bound levels",
                unit_of(m.CLIENT_BOTTLENECK),
                [Query(gauge(m.CLIENT_BOTTLENECK, ("target",)), "{{target}}")],
                f"{m.CLIENT_BOTTLENECK.help} Anything above 0 is red.",
                width=4,
                red_from=1,
            )
        )
    d.with_panel(
        stat_panel(
            "Last successful run",
            unit_of(m.LAST_SUCCESS),
            # Grafana's date units read milliseconds; the metric is Unix seconds.
            [Query(f"{gauge(m.LAST_SUCCESS, ('suite', 'target'))} * 1000", "{{suite}} {{target}}")],
            m.LAST_SUCCESS.help,
            width=4 if client else 8,
        )
    )
