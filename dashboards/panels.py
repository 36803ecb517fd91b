"""Panel factories over the grafana-foundation-sdk builders.

Every panel gets the `${datasource}` variable as its datasource (panel and each target), a
unit, a description and at least one query; the dashboards only say what to plot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from grafana_foundation_sdk.builders import common as common_b
from grafana_foundation_sdk.builders import dashboard as dashboard_b
from grafana_foundation_sdk.builders import heatmap, prometheus, stat, timeseries
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import variants as cogvariants
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as dashboard_m
from grafana_foundation_sdk.models import heatmap as heatmap_m

from moeperf.collectors.export.metric_names import Metric

# Every panel and every target reads the datasource the `datasource` variable selects.
DATASOURCE = dashboard_m.DataSourceRef(type_val="prometheus", uid="${datasource}")


@dataclass(frozen=True, slots=True)
class Query:
    """One PromQL target: the expression and its legend template."""

    expr: str
    legend: str = ""


def unit_of(metric: Metric) -> str:
    """The Grafana unit of a metric's own values; `short` for plain numbers."""
    return metric.unit or "short"


def _targets(
    queries: Sequence[Query], instant: bool
) -> list[cogbuilder.Builder[cogvariants.Dataquery]]:
    if not queries:
        raise ValueError("a panel needs at least one query")
    targets: list[cogbuilder.Builder[cogvariants.Dataquery]] = []
    for i, q in enumerate(queries):
        t = prometheus.Dataquery().expr(q.expr).ref_id(chr(ord("A") + i)).datasource(DATASOURCE)
        t = t.instant() if instant else t.range()
        if q.legend:
            t = t.legend_format(q.legend)
        targets.append(t)
    return targets


def timeseries_panel(
    title: str,
    unit: str,
    queries: Sequence[Query],
    description: str,
    width: int = 12,
    height: int = 8,
    min_value: float | None = None,
) -> timeseries.Panel:
    """A line chart; the legend as a table with the last and max values."""
    legend = (
        common_b.VizLegendOptions()
        .show_legend(True)
        .display_mode(common.LegendDisplayMode.TABLE)
        .placement(common.LegendPlacement.BOTTOM)
        .calcs(["lastNotNull", "max"])
    )
    panel = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .targets(_targets(queries, instant=False))
        .legend(legend)
        .span(width)
        .height(height)
    )
    return panel.min(min_value) if min_value is not None else panel


def stat_panel(
    title: str,
    unit: str,
    queries: Sequence[Query],
    description: str,
    width: int = 6,
    height: int = 8,
    red_from: float | None = None,
) -> stat.Panel:
    """The latest value of each series; red from `red_from` upwards when given."""
    steps = [dashboard_m.Threshold(value=None, color="green")]
    if red_from is not None:
        steps.append(dashboard_m.Threshold(value=red_from, color="red"))
    thresholds = (
        dashboard_b.ThresholdsConfig().mode(dashboard_m.ThresholdsMode.ABSOLUTE).steps(steps)
    )
    return (
        stat.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .targets(_targets(queries, instant=True))
        .reduce_options(common_b.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
        .thresholds(thresholds)
        .color_mode(common.BigValueColorMode.VALUE)
        .graph_mode(common.BigValueGraphMode.NONE)
        .span(width)
        .height(height)
    )


def heatmap_panel(
    title: str,
    unit: str,
    queries: Sequence[Query],
    description: str,
    width: int = 24,
    height: int = 10,
) -> heatmap.Panel:
    """Series as rows, time across, the value as colour (no bucketing by Grafana)."""
    return (
        heatmap.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .targets(_targets(queries, instant=False))
        .calculate(False)
        .color(
            heatmap.HeatmapColorOptions().mode(heatmap_m.HeatmapColorMode.SCHEME).scheme("Spectral")
        )
        .span(width)
        .height(height)
    )


def row(title: str) -> dashboard_b.Row:
    return dashboard_b.Row(title)


def number_panels(model: dashboard_m.Dashboard) -> dashboard_m.Dashboard:
    """Give every panel and row a unique id, in order (the SDK leaves them unset or 0)."""
    next_id = 1
    for panel in model.panels or []:
        panel.id_val = next_id
        next_id += 1
        for inner in getattr(panel, "panels", None) or []:
            inner.id_val = next_id
            next_id += 1
    return model
