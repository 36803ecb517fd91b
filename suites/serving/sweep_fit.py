"""How many concurrent requests of one prompt length fit in the target at once
(``[sweep.fit]`` of a sweep over prompt lengths: the long-context suite).

A probe holds c streams (closed loop) of one length for ``sweep.fit.probe_s`` seconds, or,
when longer, 1.5 x the time its c prompts take to prefill one after another at the
length's measured single-stream TTFT p50 (``probe_duration_s``), then cancels the requests
still running. The floor matters: a target admits a request before its whole prompt is in
the KV cache (chunked prefill), so a probe that ends before c prompts could have been
prefilled sees c running and no preemption yet, and would call a fit what its cache
cannot hold (at 4,064 tokens, three 254-block prompts read as fitting 512 blocks in a 4 s
probe on a host that prefills them in 8). c fits when the target's own counters show,
at some scrape during the probe, all c requests running at once (its running-requests
gauge: ``running_max`` >= c) and none preempted (its preemptions counter rose by 0 over
the probe). Fewer running means the rest waited in its queue (for KV-cache blocks,
running slots or the step's token budget); a preemption means it ran them by evicting
one to recompute later. The search is the capacity search's
(``suites/serving/capacity/search.py``): bracketing from ``start`` by ``growth``, then
bisection to one stream, so the answer reads "F fit, F + 1 did not".

The running gauge is sampled (every ``export.scrape_interval_s``): a moment with all c
running that no scrape saw reads as "not all running", so the answer holds at that
sampling (each probe's verdict gives its scrape count). A target without a
running-requests gauge, or a run without scrapes: "not available from this target",
and the search stops there.
"""

from __future__ import annotations

from collections.abc import Callable

from moeperf.collectors.capacity_records import CapacityProbe, CapacitySummary
from moeperf.collectors.target_counters import NOT_AVAILABLE, TargetCounters
from moeperf.suites.serving.capacity.search import SearchSettings, Verdict, capacity_search
from moeperf.suites.serving.mode_spec import FitSpec

CRITERIA = "every stream's request running at once, none preempted"


def fit_scenario(input_tokens: int, streams: float) -> str:
    return f"in={input_tokens} fit c={int(streams)}"


PREFILL_MARGIN = 1.5  # over c x the single-stream TTFT p50: its spread, and c prompts' decode


def probe_duration_s(fit: FitSpec, streams: int, single_ttft_s: float | None) -> float:
    """How long a probe of ``streams`` lasts (module docstring): ``fit.probe_s``, or the
    time its prompts take to prefill one after another, with a margin, when longer."""
    if single_ttft_s is None:
        return fit.probe_s
    return max(fit.probe_s, PREFILL_MARGIN * streams * single_ttft_s)


def fit_verdict(streams: int, counters: TargetCounters | None, not_judged: str | None) -> Verdict:
    """Whether ``streams`` requests fit, from the probe's counters; None: not judged
    (``not_judged`` says why: a client-bound probe, or the target failing requests)."""
    if not_judged is not None:
        return Verdict(None, f"not judged: {not_judged}")
    if counters is None:
        return Verdict(None, f"{NOT_AVAILABLE}: no scrape of its /metrics was read")
    if counters.running_max is None:
        return Verdict(None, f"{NOT_AVAILABLE}: it exports no running-requests gauge")
    running = int(counters.running_max)
    parts = [f"at most {running} of {streams} running at once ({counters.gauge_scrapes} scrapes)"]
    preempted = counters.preemptions
    if preempted is None:
        parts.append(f"preemptions {NOT_AVAILABLE}")
    else:
        parts.append(f"{preempted:g} preempted")
    return Verdict(running >= streams and not preempted, "; ".join(parts))


def search_fit(fit: FitSpec, input_tokens: int, probe: Callable[[int], Verdict]) -> CapacitySummary:
    """The fit at one length: ``probe(streams)`` runs and judges one probe."""
    settings = SearchSettings(
        start=min(fit.start, fit.max_streams),
        growth=fit.growth,
        max_level=fit.max_streams,
        min_level=1,
        resolution=1,
        max_probes=fit.max_probes,
        integer=True,
    )
    result = capacity_search(lambda level: probe(int(level)), settings)
    probes = tuple(
        CapacityProbe(
            step.level, fit_scenario(input_tokens, step.level), step.passed, step.reason, step.phase
        )
        for step in result.steps
    )
    return CapacitySummary(
        mode="concurrency",
        criteria=CRITERIA,
        status=result.status,
        passed_level=result.passed_level,
        failed_level=result.failed_level,
        probes=probes,
    )
