"""A soak run (``[soak]`` in a serving spec), as its records and its summary hold it.

A soak is one long load level watched for slow degradation. The level's measured part
(after ``load.warmup_s``, before ``load.cooldown_s``) is cut into windows of ``window_s``;
each window gets one value per series, and each series gets a least-squares slope over its
windows (``Slope``). Times are seconds from the level's start.

What each window's figure is:
- ``output_tok_s``: tokens of ok requests whose chunks arrived in the window / window_s
  (tokens counted where they arrived, so a request spanning two windows splits).
- ``ttft_p50_s``, ``ttft_p99_s``, ``tpot_p50_s``: of the ok requests whose intended send
  time falls in the window (TTFT from the intended send, as everywhere in moeperf).
- ``rss_bytes``: the mean of the target's resident memory samples taken in the window
  (``MemorySample``: the target's process and its children, every ``memory_interval_s``;
  for a url target, the target's own ``process_resident_memory_bytes`` where it exports it).
- ``kv_usage_ratio``: the mean of the target's KV-cache usage gauge over the scrapes taken
  in the window; ``preemptions``: the increase of its preemption counter between the last
  scrape before the window and the last one in it.
- ``expert_tokens``: tokens the target routed to each (layer, expert) over the window (the
  same counter increase), from which the expert-load share drift is computed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from moeperf.collectors.schema import SCHEMA_VERSION


@dataclass(frozen=True, slots=True)
class MemorySample:
    """One reading of the target's resident memory, stored as it is taken (memory.jsonl).

    ``t_ns`` is on the run's clock (ns from its anchor); ``rss_bytes`` sums the resident set
    of the target's process (``pid``) and of its ``processes - 1`` descendants.
    """

    # When the reading was taken (ns from the run's anchor).
    t_ns: int
    # Resident memory of the target's process and all its descendants, summed.
    rss_bytes: int
    # How many processes that sum covers (the target's and its descendants).
    processes: int
    # The target's root process.
    pid: int
    # The soak level being run.
    scenario: str
    # The record layout's version (collectors/schema.py); readers refuse one they do not know.
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True, slots=True)
class Slope:
    """A series' least-squares trend over the windows, with its 95% interval.

    ``per_hour``: the slope in the series' unit per hour of the level, from
    ``scipy.stats.linregress`` over (window mid time, window value); the interval is
    slope +/- t(0.975, n - 2) x its standard error (None with fewer than 3 windows).
    ``percent_*``: the same relative to ``first`` (the first window's value), in % per
    hour; None where ``first`` is 0 or missing.
    """

    windows: int  # windows with a value (the fit's points)
    first: float | None
    last: float | None
    span_s: float = 0.0  # from the first to the last of those windows' mid times
    per_hour: float | None = None
    low_per_hour: float | None = None
    high_per_hour: float | None = None
    percent_per_hour: float | None = None
    percent_low_per_hour: float | None = None
    percent_high_per_hour: float | None = None


@dataclass(frozen=True, slots=True)
class SoakWindow:
    index: int
    start_s: float
    end_s: float
    requests_ok: int  # intended send time in the window
    requests_failed: int
    output_tok_s: float | None
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    tpot_p50_s: float | None
    rss_bytes: float | None
    rss_samples: int
    kv_usage_ratio: float | None = None
    preemptions: float | None = None
    expert_tokens: float | None = None  # all experts, all layers


@dataclass(frozen=True, slots=True)
class SoakThresholds:
    """The spec's thresholds, kept with the verdicts they decided (``[soak]`` has the
    defaults and why)."""

    leak_min_bytes_per_hour: float
    leak_min_percent_per_hour: float
    drift_min_percent_per_hour: float
    drift_min_percent: float
    kv_min_points_per_hour: float
    expert_drift_max: float
    # KV usage must also rise this many points over the windows' span (0 in summaries
    # written before this rule).
    kv_min_points: float = 0.0


VerdictName = Literal[
    "memory leak", "throughput drift", "TTFT drift", "TPOT drift", "KV usage rising",
    "expert-load drift",
]  # fmt: skip
# found: the rule held; not found: it did not (the interval allows no such trend, or
# includes zero); not available: the target does not report what it needs; too few
# windows: fewer than 3 (no interval).
Outcome = Literal["found", "not found", "not available", "too few windows"]


@dataclass(frozen=True, slots=True)
class SoakVerdict:
    name: VerdictName
    outcome: Outcome
    fails_run: bool  # a "found" of this verdict fails the run
    reason: str  # the figures that decided it, in words


@dataclass(frozen=True, slots=True)
class SoakSummary:
    scenario: str
    window_s: float
    memory_interval_s: float
    # Where ``rss_bytes`` came from: "process" (psutil), "target metric", or "none".
    memory_source: Literal["process", "target metric", "none"]
    windows: tuple[SoakWindow, ...]
    throughput: Slope  # output tokens/s
    ttft_p50: Slope  # seconds
    ttft_p99: Slope  # seconds (shown, not judged: few samples per window)
    tpot_p50: Slope  # seconds
    rss: Slope  # bytes
    kv_usage: Slope  # ratio 0-1; per_hour x 100: percentage points per hour
    preemptions: Slope  # preemptions per window
    preemptions_total: float | None
    # Total variation distance between the first and last windows' expert-load shares,
    # per MoE layer (0: same shares, 1: disjoint); None: no expert counters.
    expert_drift_by_layer: tuple[float, ...] | None
    thresholds: SoakThresholds
    verdicts: tuple[SoakVerdict, ...]
    # The level's start on the run's clock (s from its anchor): windows' ``start_s`` are
    # from it, scrapes' and memory samples' ``t_ns`` from the anchor. None: a summary
    # written before this field.
    level_start_s: float | None = None

    @property
    def failures(self) -> tuple[SoakVerdict, ...]:
        return tuple(v for v in self.verdicts if v.outcome == "found" and v.fails_run)
