"""The target's own counters per load level, put into a run's summary.

The run's scraper stored every scrape of the target's /metrics in server_metrics.jsonl
with counter increases per level (``suites.serving.observe.scraper``);
``collectors.target_counters`` turns them into one ``TargetCounters`` per level, and this
module gives each scenario of the summary its own. A level without a stored scrape (the
scraper off, or the target's /metrics unreadable) keeps ``target_counters=None``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from moeperf.collectors.serving_records import ScenarioSummary
from moeperf.collectors.store import RunReader
from moeperf.collectors.target_counters import level_target_counters


def with_target_counters(
    scenarios: dict[str, ScenarioSummary], run_directory: Path
) -> dict[str, ScenarioSummary]:
    """``scenarios`` with the target's counters of each level from the run's scrapes.

    Called after the scraper's last scrape (``LiveObservers.stop_scraping``), so every
    level's window is closed.
    """
    counters = level_target_counters(RunReader(run_directory).server_metrics())
    return {
        name: dataclasses.replace(entry, target_counters=counters.get(name))
        for name, entry in scenarios.items()
    }
