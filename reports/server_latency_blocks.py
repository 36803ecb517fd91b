"""The report's "client vs server" table: each level's client figures beside the target's
own latency histograms (vLLM), the server's estimated from its buckets and shown with the
bucket's bounds. Definitions, and the sentence on how the two differ that the caption
quotes: ``collectors.server_latency``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from moeperf.collectors.server_latency import CLIENT_VS_SERVER
from moeperf.collectors.server_latency_compare import comparisons
from moeperf.collectors.serving_records import ScenarioSummary
from moeperf.reports.render import Table
from moeperf.reports.target_text import bucket_text


def _ms(value_s: float | None) -> float | None:
    return None if value_s is None else value_s * 1e3


def server_latency_table(scenarios: Mapping[str, ScenarioSummary]) -> Table | None:
    """A row per level and figure; None when no level has the target's histograms."""
    rows: list[dict[str, Any]] = []
    for name, entry in scenarios.items():
        c = entry.target_counters
        if c is None or c.server_latency is None:
            continue
        ttft = c.server_latency.ttft_s
        for row in comparisons(entry.latency_s, c.server_latency):
            rows.append(
                {
                    "scenario": name,
                    "metric": row.label,
                    "client ms": _ms(row.client_s),
                    "server ms": _ms(row.server_s),
                    "server bucket ms": bucket_text(row),
                    "client ok requests": entry.ok,
                    "server requests": None if ttft is None else ttft.count,
                    "server": c.dialect,
                }
            )
    if not rows:
        return None
    return Table(
        pd.DataFrame(rows),
        "Client vs server: the client's figures from raw samples (TTFT from send, the gaps "
        "between chunks, E2E) beside the target's own histograms over the level, estimated "
        "from their buckets (linear inside the bucket, as Prometheus' histogram_quantile; the "
        "bucket's bounds beside each), means exact. The server counts every request that "
        f"finished in the level, warm-up, cool-down and failed ones included. {CLIENT_VS_SERVER}",
    )
