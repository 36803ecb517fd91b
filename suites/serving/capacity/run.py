"""A capacity run: the search (search.py) driving the runner's levels, judged (judge.py).

The runner hands over ``run_level``, which runs one load level exactly as a sweep does
and returns its outcome; each probe's summary is computed from that level's records
alone, judged, and the search picks the next level. The result goes into the run's
summary (``ServingSummary.capacity``) and a note.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import pandas as pd

from moeperf.collectors.capacity_records import CapacityProbe, CapacitySummary
from moeperf.collectors.serving_records import Slo
from moeperf.collectors.summary import summarize_requests
from moeperf.suites.serving.capacity.judge import criteria_text, judge_probe
from moeperf.suites.serving.capacity.search import SearchSettings, Verdict, capacity_search
from moeperf.suites.serving.mode_spec import CapacitySpec
from moeperf.suites.serving.spec import ServingSpec

if TYPE_CHECKING:
    from moeperf.suites.serving.level_plan import LevelOutcome

_STATUS_TEXT = {
    "resolved": "resolved to the resolution",
    "probe_limit": "the probe budget ran out first",
    "above_max": "every level up to capacity.max_level passed",
    "below_min": "even capacity.min_level failed",
    "stopped": "a probe could not be judged",
}


def probe_budget(spec: ServingSpec, level: float, last_rate_rps: float) -> int | None:
    """What a closed-loop, count-bound probe sends so that ``load.max_requests`` of its
    requests are measured: the warm-up excludes the first request of every stream and
    those sent in its first ``warmup_s`` (at the last probe's rate, with 20% to spare).
    None: the probe is bounded as [load] says (open loop: by its duration)."""
    load = spec.load
    if load.mode != "concurrency" or not load.count_bound or load.max_requests is None:
        return None
    warm_up = math.ceil(level) + math.ceil(1.2 * last_rate_rps * load.warmup_s)
    return load.max_requests + warm_up


def search_capacity(
    spec: ServingSpec,
    capacity: CapacitySpec,
    run_level: Callable[[float, int | None], LevelOutcome],
    requests: Callable[[], pd.DataFrame],
) -> CapacitySummary:
    """Search the capacity, one level per probe; ``requests()`` gives the run's requests
    so far (read back from its file: each probe is judged on its own level's)."""
    slo = Slo(**spec.slo.model_dump())
    scenarios: dict[float, str] = {}
    last_rate_rps = 0.0

    def probe(level: float) -> Verdict:
        nonlocal last_rate_rps
        outcome = run_level(level, probe_budget(spec, level, last_rate_rps))
        scenarios[level] = outcome.scenario
        frame = requests()
        mine = frame[frame["scenario"] == outcome.scenario]
        entry = summarize_requests(mine, slo).scenarios.get(outcome.scenario)
        if entry is None:
            return Verdict(False, "no measured request ended in the level")
        last_rate_rps = entry.request_throughput_rps or last_rate_rps
        entry = dataclasses.replace(
            entry, status=outcome.verdict.status, status_reason=outcome.verdict.reason
        )
        return judge_probe(entry, capacity)

    settings = SearchSettings(
        start=capacity.start,
        growth=capacity.growth,
        max_level=capacity.max_level,
        min_level=capacity.min_level,
        resolution=capacity.resolution,
        max_probes=capacity.max_probes,
        integer=spec.load.mode == "concurrency",
    )
    result = capacity_search(probe, settings)
    return CapacitySummary(
        mode=spec.load.mode,
        criteria=criteria_text(capacity),
        status=result.status,
        passed_level=result.passed_level,
        failed_level=result.failed_level,
        probes=tuple(
            CapacityProbe(step.level, scenarios[step.level], step.passed, step.reason, step.phase)
            for step in result.steps
        ),
        ttft_p99_limit_s=capacity.ttft_p99_s,
        tpot_p99_limit_s=capacity.tpot_p99_s,
        min_goodput_ratio=capacity.min_goodput_ratio,
    )


def capacity_note(summary: CapacitySummary) -> str:
    return (
        f"Capacity search for {summary.criteria}: capacity {summary.answer()}, "
        f"after {len(summary.probes)} probes ({_STATUS_TEXT[summary.status]}). Each probe is "
        "one load level of this run (a closed-loop probe bounded by count sends its "
        "warm-up on top of load.max_requests, so that many are measured); a level above "
        "the capacity may fail, which ends the bracket and does not fail the run."
    )


def capacity_verdict(summary: CapacitySummary) -> tuple[str, str | None]:
    """The run's status: complete, or invalid when a probe could not be judged."""
    if summary.status == "stopped":
        last = summary.probes[-1]
        return "invalid", f"capacity search stopped at {last.scenario}: {last.reason}"
    return "complete", None
