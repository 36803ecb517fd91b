"""The target's own latency histograms beside the client's, for the terminal: a table per
level (detail), the sentence that says how the two differ (once), and one answer line
where they are far apart. Definitions: ``collectors.server_latency``."""

from __future__ import annotations

from collections.abc import Mapping

from rich.table import Table

from moeperf.collectors.server_latency import CLIENT_VS_SERVER, far_apart
from moeperf.collectors.server_latency_compare import comparisons
from moeperf.collectors.serving_records import ScenarioSummary
from moeperf.collectors.units import ms_text
from moeperf.reports.target_text import bucket_bounds, bucket_text
from moeperf.reports.terminal.cells import DASH


def server_latency_table(scenario: str, entry: ScenarioSummary) -> Table | None:
    """The level's client figures beside the target's histograms; None without them."""
    c = entry.target_counters
    if c is None or c.server_latency is None:
        return None
    server = c.server_latency
    counted = server.ttft_s.count if server.ttft_s is not None else None
    n = DASH if counted is None else f"{counted:,.0f}"
    table = Table(
        title=f"{scenario} client vs {c.dialect}: the client's {entry.ok} ok measured "
        f"requests; {c.dialect}'s {n} finished in the level, estimated from its buckets",
    )
    heads = ("metric", "client ms", f"{c.dialect} ms", f"{c.dialect} bucket ms")
    for i, head in enumerate(heads):
        table.add_column(head, justify="left" if i == 0 else "right")
    for row in comparisons(entry.latency_s, server):
        client = DASH if row.client_s is None else ms_text(row.client_s)
        table.add_row(row.label, client, ms_text(row.server_s), bucket_text(row))
    return table


def client_vs_server_line(scenarios: Mapping[str, ScenarioSummary]) -> str | None:
    """How the client's and the target's latencies differ, said once for the run."""
    if not any(_server(e) for e in scenarios.values()):
        return None
    return f"client vs server: {CLIENT_VS_SERVER}"


def far_apart_line(scenarios: Mapping[str, ScenarioSummary]) -> str | None:
    """One answer line naming the levels whose client and server TTFT p50 are further
    apart than the server's buckets explain; None where none is."""
    apart: list[str] = []
    dialect = ""
    for name, entry in scenarios.items():
        c = entry.target_counters
        ttft = None if c is None or c.server_latency is None else c.server_latency.ttft_s
        if c is None or ttft is None or ttft.p50 is None:
            continue
        client = entry.latency_s.ttft_from_send_s.value_at(0.5)
        if far_apart(client, ttft.p50):
            dialect = c.dialect
            apart.append(
                f"{name} {ms_text(client)} ms against {ms_text(ttft.p50.value_s)} ms "
                f"(its {bucket_bounds(ttft.p50)} ms bucket)"
            )
    if not apart:
        return None
    return (
        f"TTFT p50, the client's (from send) far from {dialect}'s own: "
        + "; ".join(apart)
        + " (--verbose: each level's client vs server, and how they differ)"
    )


def _server(entry: ScenarioSummary) -> bool:
    c = entry.target_counters
    return c is not None and c.server_latency is not None
