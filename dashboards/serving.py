"""The serving dashboard: latency, throughput, goodput, the target's engine, and the harness.

Series are split by target and scenario, so targets picked together stay comparable.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as dashboard_b
from grafana_foundation_sdk.builders import timeseries
from grafana_foundation_sdk.models import dashboard as dashboard_m

from moeperf.collectors.export import metric_names as m

from .accelerators import accelerator_row
from .health import harness_health_row
from .panels import Query, heatmap_panel, number_panels, row, timeseries_panel, unit_of
from .promql import QUANTILES, gauge, or_zero, quantile, rate, ratio
from .variables import datasource_variable, label_variables

UID = "moeperf-serving"
BY = ("target", "scenario")
LEGEND = "{{target}} {{scenario}}"


def _latency(title: str, metric: m.Metric) -> timeseries.Panel:
    queries = [Query(quantile(q, metric, BY), f"{LEGEND} p{round(q * 100)}") for q in QUANTILES]
    return timeseries_panel(
        f"{title} p50 / p90 / p99",
        unit_of(metric),
        queries,
        f"{metric.help} Estimated from histogram buckets; reports use raw samples.",
    )


def _latency_row(d: dashboard_b.Dashboard) -> None:
    d.with_row(row("Latency"))
    d.with_panel(_latency("TTFT", m.TTFT))
    d.with_panel(_latency("TPOT", m.TPOT))
    d.with_panel(_latency("ITL", m.ITL))
    d.with_panel(_latency("E2E", m.E2E))


def _throughput_row(d: dashboard_b.Dashboard) -> None:
    requests = rate(m.REQUESTS, BY)
    errors = rate(m.REQUESTS, BY, extra='status!="ok"')
    good = or_zero(rate(m.GOOD_REQUESTS, BY), requests)
    d.with_row(row("Throughput and load"))
    d.with_panel(
        timeseries_panel(
            "Tokens / s",
            unit_of(m.OUTPUT_TOKENS),
            [
                Query(rate(m.OUTPUT_TOKENS, BY), f"{LEGEND} output"),
                Query(rate(m.PROMPT_TOKENS, BY), f"{LEGEND} prompt"),
            ],
            "Output and prompt tokens of ok requests per second.",
            width=8,
        )
    )
    d.with_panel(
        timeseries_panel(
            "Requests / s by status",
            "reqps",
            [
                Query(rate(m.REQUESTS, (*BY, "status")), f"{LEGEND} {{{{status}}}}"),
                Query(rate(m.TARGET_FINISHED_REQUESTS, BY), f"{LEGEND} finished (target)"),
            ],
            f"{m.REQUESTS.help} {m.TARGET_FINISHED_REQUESTS.help}",
            width=8,
            min_value=0,
        )
    )
    d.with_panel(
        timeseries_panel(
            "Error ratio",
            "percentunit",
            [Query(ratio(or_zero(errors, requests), requests), LEGEND)],
            "Requests not ok (error or cancelled) / all finished requests.",
            width=8,
            min_value=0,
        )
    )
    d.with_panel(
        timeseries_panel(
            "Concurrency",
            unit_of(m.IN_FLIGHT),
            [
                Query(gauge(m.IN_FLIGHT, BY), f"{LEGEND} in flight"),
                Query(gauge(m.LOAD_LEVEL, BY), f"{LEGEND} offered load"),
            ],
            f"{m.IN_FLIGHT.help} {m.LOAD_LEVEL.help}",
            width=8,
        )
    )
    d.with_panel(
        timeseries_panel(
            "Goodput",
            "reqps",
            [Query(good, LEGEND)],
            m.GOOD_REQUESTS.help,
            width=8,
            min_value=0,
        )
    )
    d.with_panel(
        timeseries_panel(
            "SLO attainment (good / finished)",
            "percentunit",
            [Query(ratio(good, requests), LEGEND)],
            "Requests meeting every SLO / all finished requests, failures included.",
            width=8,
            min_value=0,
        )
    )


def _target_row(d: dashboard_b.Dashboard) -> None:
    d.with_row(row("Target engine"))
    accepted = ratio(rate(m.TARGET_ACCEPTED_TOKENS, BY), rate(m.TARGET_DRAFT_TOKENS, BY))
    d.with_panel(
        timeseries_panel(
            "Spec-decode acceptance",
            "percentunit",
            [Query(accepted, LEGEND)],
            "Accepted / proposed speculative (MTP) draft tokens.",
            width=8,
            min_value=0,
        )
    )
    d.with_panel(
        timeseries_panel(
            "Spec-decode accepted length",
            unit_of(m.TARGET_ACCEPT_LENGTH),
            [Query(gauge(m.TARGET_ACCEPT_LENGTH, BY), LEGEND)],
            m.TARGET_ACCEPT_LENGTH.help,
            width=8,
            min_value=0,
        )
    )
    d.with_panel(
        timeseries_panel(
            "KV-cache usage",
            unit_of(m.TARGET_KV_USAGE),
            [Query(gauge(m.TARGET_KV_USAGE, BY), LEGEND)],
            m.TARGET_KV_USAGE.help,
            width=8,
            min_value=0,
        )
    )
    hits = ratio(rate(m.TARGET_PREFIX_HITS, BY), rate(m.TARGET_PREFIX_QUERIES, BY))
    d.with_panel(
        timeseries_panel(
            "Prefix-cache hit rate",
            "percentunit",
            [
                Query(hits, LEGEND),
                Query(gauge(m.TARGET_PREFIX_HIT_RATIO, BY), f"{LEGEND} (reported)"),
            ],
            "Prefix-cache hits / queries, in the unit the target counts; the target's own "
            "ratio where it exports no counters.",
            width=8,
            min_value=0,
        )
    )
    d.with_panel(
        timeseries_panel(
            "Target queue",
            unit_of(m.TARGET_RUNNING),
            [
                Query(gauge(m.TARGET_RUNNING, BY), f"{LEGEND} running"),
                Query(gauge(m.TARGET_WAITING, BY), f"{LEGEND} waiting"),
            ],
            f"{m.TARGET_RUNNING.help} {m.TARGET_WAITING.help}",
            width=8,
        )
    )
    d.with_panel(
        timeseries_panel(
            "Target tokens / s",
            unit_of(m.TARGET_GENERATION_TOKENS),
            [
                Query(rate(m.TARGET_GENERATION_TOKENS, BY), f"{LEGEND} generated"),
                Query(rate(m.TARGET_PROMPT_TOKENS, BY), f"{LEGEND} prompt"),
            ],
            "Tokens as the target counts them; compare with the client's Tokens / s.",
            width=8,
            min_value=0,
        )
    )
    d.with_panel(
        heatmap_panel(
            "Expert load (tokens / s per layer and expert)",
            unit_of(m.TARGET_EXPERT_TOKENS),
            [Query(rate(m.TARGET_EXPERT_TOKENS, ("layer", "expert")), "L{{layer}} E{{expert}}")],
            f"{m.TARGET_EXPERT_TOKENS.help} Summed over the selected targets and scenarios; "
            "a hot row is an overloaded expert.",
        )
    )


def serving_dashboard() -> dashboard_m.Dashboard:
    """The serving dashboard's model (uid `moeperf-serving`)."""
    d = (
        dashboard_b.Dashboard("moeperf serving")
        .uid(UID)
        .description("Live and pushed metrics of moeperf serving runs.")
        .tags(["moeperf", "serving"])
        .time("now-1h", "now")
        .refresh("10s")
        .tooltip(dashboard_m.DashboardCursorSync.CROSSHAIR)
        .with_variable(datasource_variable())
    )
    for variable in label_variables(m.REQUESTS, ("suite", "target", "scenario")):
        d.with_variable(variable)
    _latency_row(d)
    _throughput_row(d)
    _target_row(d)
    accelerator_row(d, m.OUTPUT_TOKENS, "output token of ok requests")
    harness_health_row(d, client=True)
    return number_panels(d.build())
