"""An elasticity drill in the report: a row per event with its verdict, and each replica's
share of the traffic; the drill's own blocks (failures by cause, the audit, the timeline
with each event marked) follow. Definitions in ``collectors.elastic_records``."""

from __future__ import annotations

import pandas as pd

from moeperf.collectors.elastic_records import ElasticSummary
from moeperf.reports.render import Table


def elastic_blocks(elastic: ElasticSummary) -> list[Table]:
    events = pd.DataFrame(
        [
            {
                "event": e.action if e.done else f"{e.action} (NOT DONE)",
                "replica": e.replica,
                "at s": e.at_s,
                "in flight": e.in_flight,
                "failed": e.failed,
                "lost in flight": e.lost_in_flight,
                "lost before noticed": e.lost_undetected,
                "lost after": e.lost_after,
                "first served s": e.first_served_s,
                "drained s": e.drained_s,
                "recovery s": e.recovery_s,
                "output tok/s before": e.output_tok_s_before,
                "output tok/s after": e.output_tok_s_after,
                "verdict": e.verdict.upper() if e.verdict == "fail" else e.verdict,
                "why": e.why,
            }
            for e in elastic.events
        ]
    )
    shares = pd.DataFrame(
        [{"replica": i, "share of requests": share} for i, share in elastic.shares.items()]
    )
    return [
        Table(
            events,
            f"Elasticity drill through {elastic.router}, {elastic.replicas_started} replicas "
            "started in all. in flight: what the replica held (its /metrics) just before; "
            "lost in flight / after: a kill's failed requests sent before / after it (after: "
            "the router sent them to the dead replica); first served s: the event's start to "
            "the router's first request answered by the replica; recovery s: as the fault "
            "drill's.",
            answers=True,
        ),
        Table(shares, "Each replica's share of the requests the router sent during the level."),
    ]
