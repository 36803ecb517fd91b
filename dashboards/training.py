"""The training dashboard: MFU, throughput, step time, memory, failures, expert balance.

Series are split by target and policy.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as dashboard_b
from grafana_foundation_sdk.models import dashboard as dashboard_m

from moeperf.collectors.export import metric_names as m

from .accelerators import accelerator_row
from .health import harness_health_row
from .panels import Query, number_panels, row, timeseries_panel, unit_of
from .promql import QUANTILES, gauge, increase, quantile, rate
from .variables import datasource_variable, label_variables

UID = "moeperf-training"
BY = ("target", "policy")
LEGEND = "{{target}} {{policy}}"


def training_dashboard() -> dashboard_m.Dashboard:
    """The training dashboard's model (uid `moeperf-training`)."""
    d = (
        dashboard_b.Dashboard("moeperf training")
        .uid(UID)
        .description("Live and pushed metrics of moeperf training runs.")
        .tags(["moeperf", "training"])
        .time("now-1h", "now")
        .refresh("10s")
        .tooltip(dashboard_m.DashboardCursorSync.CROSSHAIR)
        .with_variable(datasource_variable())
    )
    for variable in label_variables(m.TRAIN_TOKENS, ("suite", "target", "policy")):
        d.with_variable(variable)

    d.with_row(row("Training"))
    d.with_panel(
        timeseries_panel(
            "MFU",
            unit_of(m.MFU),
            [Query(gauge(m.MFU, BY), LEGEND)],
            m.MFU.help,
            min_value=0,
        )
    )
    d.with_panel(
        timeseries_panel(
            "Tokens / s",
            unit_of(m.TRAIN_TOKENS),
            [Query(rate(m.TRAIN_TOKENS, BY), LEGEND)],
            "Tokens trained on per second.",
            min_value=0,
        )
    )
    d.with_panel(
        timeseries_panel(
            "Step time p50 / p90 / p99",
            unit_of(m.STEP_TIME),
            [Query(quantile(q, m.STEP_TIME, BY), f"{LEGEND} p{round(q * 100)}") for q in QUANTILES],
            f"{m.STEP_TIME.help} Estimated from histogram buckets.",
        )
    )
    d.with_panel(
        timeseries_panel(
            "Peak memory",
            unit_of(m.PEAK_MEMORY),
            [Query(gauge(m.PEAK_MEMORY, BY), LEGEND)],
            m.PEAK_MEMORY.help,
            min_value=0,
        )
    )
    d.with_panel(
        timeseries_panel(
            "OOMs and restarts",
            unit_of(m.OOMS),
            [
                Query(increase(m.OOMS, BY), f"{LEGEND} OOMs"),
                Query(increase(m.RESTARTS, BY), f"{LEGEND} restarts"),
            ],
            f"{m.OOMS.help} {m.RESTARTS.help} Counted per rate interval.",
            min_value=0,
        )
    )
    d.with_panel(
        timeseries_panel(
            "Expert load imbalance (max / mean)",
            unit_of(m.EXPERT_IMBALANCE),
            [Query(gauge(m.EXPERT_IMBALANCE, BY), LEGEND)],
            f"{m.EXPERT_IMBALANCE.help} 1 is perfectly balanced.",
        )
    )
    accelerator_row(d, m.TRAIN_TOKENS, "token trained on")
    harness_health_row(d, client=False)
    return number_panels(d.build())
