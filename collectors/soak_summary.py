"""A soak level's windows, slopes and verdicts (collectors.soak_records says what each is).

Inputs are what the run stored: the request records, the target's memory samples
(memory.jsonl) and its scrapes (server_metrics.jsonl). Pure: no clocks, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from moeperf.collectors.export import metric_names as mn
from moeperf.collectors.latency import per_request
from moeperf.collectors.soak_records import (
    MemorySample,
    Slope,
    SoakSummary,
    SoakThresholds,
    SoakWindow,
)
from moeperf.collectors.soak_slope import fit_slope
from moeperf.collectors.soak_target_series import TargetSeries
from moeperf.collectors.soak_verdicts import drift_verdict, expert_verdict, kv_verdict, leak_verdict
from moeperf.collectors.sources import target_dialects as td
from moeperf.collectors.tables import flatten_list_column, list_column_lengths

NS_PER_S = 1_000_000_000


@dataclass(frozen=True, slots=True)
class SoakPlan:
    """Where the soak's windows lie: the measured part of its one level, cut in windows."""

    scenario: str
    level_start_ns: int  # on the run's clock (ns from its anchor)
    measure_from_s: float  # from the level's start: after load.warmup_s
    measure_to_s: float  # before load.cooldown_s
    window_s: float
    memory_interval_s: float
    thresholds: SoakThresholds

    def edges_s(self) -> list[tuple[float, float]]:
        """Whole windows only: a last stub shorter than window_s is left out."""
        count = int((self.measure_to_s - self.measure_from_s) / self.window_s + 1e-9)
        start = self.measure_from_s
        return [(start + i * self.window_s, start + (i + 1) * self.window_s) for i in range(count)]


def summarize_soak(
    requests: pd.DataFrame,
    memory: Sequence[MemorySample],
    scrapes: Sequence[Mapping[str, Any]],
    plan: SoakPlan,
) -> SoakSummary:
    edges = plan.edges_s()
    level = requests[requests["scenario"] == plan.scenario] if len(requests) else requests
    target = TargetSeries(scrapes)
    rss_by_window, source = _rss(memory, target, plan)
    windows = tuple(
        _window(i, a, b, level, plan.level_start_ns, rss_by_window[i], target)
        for i, (a, b) in enumerate(edges)
    )
    mids = [(w.start_s + w.end_s) / 2 for w in windows]

    def slope(values: list[float | None]) -> Slope:
        return fit_slope(mids, values)

    t = plan.thresholds
    throughput = slope([w.output_tok_s for w in windows])
    ttft_p50 = slope([w.ttft_p50_s for w in windows])
    tpot_p50 = slope([w.tpot_p50_s for w in windows])
    rss = slope([w.rss_bytes for w in windows])
    kv = slope([w.kv_usage_ratio for w in windows])
    preempted = [w.preemptions for w in windows if w.preemptions is not None]
    preemptions_total = float(sum(preempted)) if preempted else None
    expert_drift = None
    if len(edges) >= 2:
        expert_drift = target.expert_drift(_ns(plan, edges[0]), _ns(plan, edges[-1]))
    verdicts = (
        leak_verdict(rss, t),
        drift_verdict("throughput drift", throughput, "output tok/s", -1, t),
        drift_verdict("TTFT drift", ttft_p50, "TTFT p50", +1, t),
        drift_verdict("TPOT drift", tpot_p50, "TPOT p50", +1, t),
        kv_verdict(kv, preemptions_total, t),
        expert_verdict(expert_drift, t),
    )
    return SoakSummary(
        scenario=plan.scenario,
        window_s=plan.window_s,
        memory_interval_s=plan.memory_interval_s,
        memory_source=source,
        windows=windows,
        throughput=throughput,
        ttft_p50=ttft_p50,
        ttft_p99=slope([w.ttft_p99_s for w in windows]),
        tpot_p50=tpot_p50,
        rss=rss,
        kv_usage=kv,
        preemptions=slope([w.preemptions for w in windows]),
        preemptions_total=preemptions_total,
        expert_drift_by_layer=expert_drift,
        thresholds=t,
        verdicts=verdicts,
        level_start_s=plan.level_start_ns / NS_PER_S,
    )


def _ns(plan: SoakPlan, edges_s: tuple[float, float]) -> tuple[int, int]:
    start_s, end_s = edges_s
    return plan.level_start_ns + round(start_s * NS_PER_S), plan.level_start_ns + round(
        end_s * NS_PER_S
    )


def _quantile(values: pd.Series, q: float) -> float | None:
    values = values.dropna()
    return float(np.quantile(values.to_numpy(), q)) if len(values) else None


def _window(
    index: int,
    start_s: float,
    end_s: float,
    level: pd.DataFrame,
    level_start_ns: int,
    rss: tuple[float | None, int],
    target: TargetSeries,
) -> SoakWindow:
    lo, hi = level_start_ns + round(start_s * NS_PER_S), level_start_ns + round(end_s * NS_PER_S)
    ok_tokens = 0.0
    sent = level[(level["intended_send_ns"] >= lo) & (level["intended_send_ns"] < hi)]
    ok_sent = sent[sent["status"] == "ok"]
    if len(level):
        ok = level[level["status"] == "ok"]
        arrivals = flatten_list_column(ok["chunk_ns"])
        tokens = flatten_list_column(ok["chunk_tokens"])
        if len(arrivals) == len(tokens):
            ok_tokens = float(tokens[(arrivals >= lo) & (arrivals < hi)].sum())
    derived = per_request(ok_sent) if len(ok_sent) else None
    # No request answered at all in a window: its throughput is 0, a measured value.
    any_chunks = len(level) and int(list_column_lengths(level["chunk_ns"]).sum()) > 0
    return SoakWindow(
        index=index,
        start_s=start_s,
        end_s=end_s,
        requests_ok=len(ok_sent),
        requests_failed=len(sent) - len(ok_sent),
        output_tok_s=ok_tokens / (end_s - start_s) if any_chunks else None,
        ttft_p50_s=_quantile(derived["ttft_s"], 0.5) if derived is not None else None,
        ttft_p99_s=_quantile(derived["ttft_s"], 0.99) if derived is not None else None,
        tpot_p50_s=_quantile(derived["tpot_s"], 0.5) if derived is not None else None,
        rss_bytes=rss[0],
        rss_samples=rss[1],
        kv_usage_ratio=target.gauge_mean(mn.TARGET_KV_USAGE.name, lo, hi),
        preemptions=target.increase(td.TARGET_PREEMPTIONS.name, lo, hi),
        expert_tokens=target.increase(mn.TARGET_EXPERT_TOKENS.name, lo, hi),
    )


def _rss(
    memory: Sequence[MemorySample], target: TargetSeries, plan: SoakPlan
) -> tuple[list[tuple[float | None, int]], Any]:
    """Per window: the mean RSS and how many samples made it; and where it came from.

    The harness's own samples of the target's processes come first; a target it did not
    start (a URL) is read from its own ``process_resident_memory_bytes`` instead.
    """
    out: list[tuple[float | None, int]] = []
    source = "process" if memory else "none"
    for start_s, end_s in plan.edges_s():
        lo, hi = _ns(plan, (start_s, end_s))
        if memory:
            inside = [m.rss_bytes for m in memory if lo <= m.t_ns < hi]
            out.append((float(np.mean(inside)) if inside else None, len(inside)))
            continue
        values = target.gauge_values(td.TARGET_PROCESS_RSS.name, lo, hi)
        out.append((float(np.mean(values)) if values else None, len(values)))
    if source == "none" and any(n for _, n in out):
        source = "target metric"
    return out, source
