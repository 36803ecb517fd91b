"""The table of stored runs (moeperf runs list): light, so the listing starts fast."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rich.table import Table

from moeperf.collectors.target_description import TargetDescription

if TYPE_CHECKING:
    from moeperf.collectors.manifest import RunManifest


def target_label(target: Mapping[str, Any]) -> str:
    """What a run measured, in a few words (``TargetDescription.label``)."""
    return TargetDescription.of(target).label


def runs_table(manifests: Sequence[RunManifest]) -> Table:
    table = Table(title="runs")
    # The id stays on one line (it is what the other commands take); a status reason is
    # shown whole, wrapped at word boundaries in its column, never cut.
    table.add_column("run id", no_wrap=True)
    table.add_column("suite")
    table.add_column("status", overflow="fold", min_width=12)
    table.add_column("started (UTC)", overflow="fold")
    table.add_column("target", overflow="fold", min_width=12)
    for m in manifests:
        status = m.status if not m.status_reason else f"{m.status}: {m.status_reason}"
        target = target_label(m.target) if m.target else ""
        table.add_row(m.run_id, m.suite, status, m.anchor_wall_time[:19], target)
    return table
