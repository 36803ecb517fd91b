"""An elasticity drill for the terminal: one row per event with its verdict, and the
replicas' shares of the traffic (collectors/elastic_records.py defines each figure)."""

from __future__ import annotations

from rich.table import Table

from moeperf.collectors.elastic_records import ElasticSummary


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _n(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def elastic_table(elastic: ElasticSummary) -> Table:
    table = Table(
        title=f"elasticity drill: {elastic.router}",
        caption=(
            "in flight: what the replica held (its /metrics) just before; lost: a kill's "
            "failed requests sent before it / before the router could notice / later; "
            "first served: the action's start to "
            "the router's first request answered by the replica; recovery: as the fault "
            "drill's; tok/s: output tokens/s ended in the compare window before the event and "
            "after its end. Shares of the level's requests: "
            + (", ".join(f"replica {i} {share:.0%}" for i, share in elastic.shares.items())
               or "not read")
        ),
    )  # fmt: skip
    for column in ("event", "replica", "at s", "in flight", "failed", "lost", "first served s",
                   "drained s", "recovery s", "tok/s before, after", "verdict",
                   "why"):  # fmt: skip
        table.add_column(column, justify="left" if column in ("event", "why") else "right")
    for e in elastic.events:
        lost = (
            "-"
            if e.lost_in_flight is None
            else f"{e.lost_in_flight} / {e.lost_undetected} / {e.lost_after}"
        )
        table.add_row(
            e.action, str(e.replica), f"{e.at_s:.2f}",
            "-" if e.in_flight is None else f"{e.in_flight:g}", str(e.failed), lost,
            _s(e.first_served_s), _s(e.drained_s), _s(e.recovery_s),
            f"{_n(e.output_tok_s_before)}, {_n(e.output_tok_s_after)}",
            e.verdict.upper() if e.verdict == "fail" else e.verdict, e.why,
        )  # fmt: skip
    return table
