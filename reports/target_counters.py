"""The report's "Target counters" table: what the target itself counted per load level.

From each scenario's ``TargetCounters`` (``collectors.target_counters``: counter
increases over the level from the run's scrapes of the target's /metrics; gauges averaged
over the scrapes taken while it ran). A quantity the target does not export reads "not
available from this target"; a level without any stored scrape says so in every column.
The target's KV cache, as it states it, is said once under the table. The target's own
latency histograms are the next table (``reports.server_latency_blocks``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from moeperf.collectors.serving_records import ScenarioSummary
from moeperf.collectors.target_counters import NOT_AVAILABLE, TargetCounters
from moeperf.reports.render import Table
from moeperf.reports.target_text import kv_cache_line

NOT_SCRAPED = "not scraped"
CAPTION = (
    "Target counters: the target's own /metrics over each load level (counter increases "
    "between the scrapes that open and close the level, warm-up and cool-down requests "
    "included; KV-cache usage is the mean and max of the scrapes taken during the level). "
    "MTP tokens/verify step = 1 + accepted draft tokens / draft rounds (per request); "
    "acceptance = accepted / proposed draft tokens; by position i = drafts whose i-th token "
    "was accepted / drafts; tokens/engine step = generated tokens / engine steps (batch "
    "times MTP); prefix-cache hit rate = prompt tokens found in the cache / looked up (vLLM "
    "and reference; SGLang: its hit-rate gauge); cached prompt share = prompt tokens the "
    "target served from a cache / the prompt tokens it counted (vLLM)."
)
_COLUMNS = (
    "scenario",
    "dialect",
    "MTP tokens/verify step",
    "MTP acceptance",
    "acceptance by position",
    "tokens/engine step",
    "KV usage mean (0-1)",
    "KV usage max (0-1)",
    "preemptions",
    "prefix-cache hit rate",
    "cached prompt share",
    "scrapes during level",
)


def _or_absent(value: float | None) -> Any:
    return NOT_AVAILABLE if value is None else value


def _row(name: str, c: TargetCounters | None, unavailable: str | None) -> dict[str, Any]:
    if c is None and unavailable is not None:
        cells = {col: "not available" for col in _COLUMNS[1:]}
        return {"scenario": name, **cells, "dialect": f"not available ({unavailable})"}
    if c is None:
        return {"scenario": name, **{col: NOT_SCRAPED for col in _COLUMNS[1:]}}
    no_drafts = "no drafts (MTP off)" if c.spec_drafts == 0 else None
    by_position = (
        " / ".join(f"{a:.3f}" for a in c.spec_acceptance_by_position)
        if c.spec_acceptance_by_position
        else no_drafts or NOT_AVAILABLE
    )
    hit_rate: Any = _or_absent(c.prefix_cache_hit_ratio)
    if c.prefix_cache_hit_ratio is None and c.prefix_cache_queries == 0:
        hit_rate = "no lookups"
    return {
        "scenario": name,
        "dialect": c.dialect,
        "MTP tokens/verify step": no_drafts or _or_absent(c.spec_tokens_per_step),
        "MTP acceptance": no_drafts or _or_absent(c.spec_acceptance_ratio),
        "acceptance by position": by_position,
        "tokens/engine step": _or_absent(c.generation_tokens_per_engine_step),
        "KV usage mean (0-1)": _or_absent(c.kv_usage_mean_ratio),
        "KV usage max (0-1)": _or_absent(c.kv_usage_max_ratio),
        "preemptions": _or_absent(c.preemptions),
        "prefix-cache hit rate": hit_rate,
        "cached prompt share": _or_absent(c.prompt_tokens_cached_ratio),
        "scrapes during level": c.gauge_scrapes,
    }


def target_counters_table(
    scenarios: Mapping[str, ScenarioSummary], unavailable: str | None = None
) -> Table | None:
    """One row per level; None for a run without levels. ``unavailable``: why the
    target's /metrics could not be read at all (``collectors.target_counters``)."""
    if not scenarios:
        return None
    rows = [_row(name, entry.target_counters, unavailable) for name, entry in scenarios.items()]
    kv_cache = kv_cache_line(scenarios)
    caption = CAPTION if kv_cache is None else f"{CAPTION} The target's {kv_cache}."
    return Table(pd.DataFrame(rows, columns=list(_COLUMNS)), caption)
