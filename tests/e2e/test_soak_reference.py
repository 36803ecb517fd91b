"""serving.soak on a real engine: ``moeperf run soak-reference`` against the embedded
reference MoE engine, whose small KV cache makes it preempt.

The KV-usage, preemption and expert-load paths of the soak are checked against what the
engine itself exposed: while the run goes, this test reads the engine's /metrics on its
own (the URL from the run's manifest, times on the run's clock: time.monotonic_ns is
system-wide); afterwards every window's figures are recomputed from the raw values the
engine published (``value`` of the stored scrapes, not the scraper's ``run_value``) at the
window's edges, placed by the level's start the summary records. A clean engine under a
steady load must come out clean: no leak, no drift, KV usage level.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cli_process import moeperf
from prometheus_client.parser import text_string_to_metric_families

from moeperf.collectors.export import metric_names as mn
from moeperf.collectors.serving_records import ServingSummary
from moeperf.collectors.soak_records import SoakSummary
from moeperf.collectors.sources import target_dialects as td
from moeperf.collectors.store import RunStore
from moeperf.specs import load_spec

pytestmark = pytest.mark.slow

# The verdicts and the target's series are under test, not the client: on a busy 2-core
# host the load worker's loop can lag past the precise engine's 2 ms bound, which would
# end the run invalid (as in test_soak.py).
RELAXED = ("--set", "harness.max_loop_lag_p99_s=1.0", "--set", "harness.max_cpu_fraction=1.0")
# 35 s instead of the spec's 60: 5 windows of 5 s after its 10 s warm-up, as test_soak.py.
# Every count is checked per window, whatever its length; the verdicts must still all be
# "not found", now from windows of half the requests: noisier figures are a harder test
# of a detector that must not raise a false alarm, not an easier one.
SHORT = ("--set", "load.duration_s=35", "--set", "soak.window_s=5")
POLL_S = 0.1


@dataclass(frozen=True)
class Reading:
    """The engine's own counters and gauges, read by this test at ``t_ns``."""

    t_ns: int
    preemptions: float
    busy: float  # requests running + waiting
    kv_usage: float  # ratio of KV blocks in use


def _read_engine(url: str) -> Reading:
    with urllib.request.urlopen(f"{url}/metrics", timeout=2) as response:
        text = response.read().decode()
    t_ns = time.monotonic_ns()
    values = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if not sample.labels:
                values[sample.name] = sample.value
    busy = values["reference_requests_running"] + values["reference_requests_waiting"]
    return Reading(t_ns, values["reference_preemptions_total"], busy,
                   values["reference_kv_cache_usage_ratio"])  # fmt: skip


def _watch(runs: Path, run: concurrent.futures.Future) -> list[Reading]:
    """Reads the engine's /metrics every POLL_S from when the run's manifest names it to
    the run's end (reads of an engine not yet up or already stopped are skipped)."""
    readings: list[Reading] = []
    url, anchor_ns = None, 0
    while not run.done():
        if url is None:
            manifests = list(runs.glob("*/manifest.json"))
            if manifests:
                manifest = json.loads(manifests[0].read_text())
                url, anchor_ns = manifest["target"]["url"], manifest["anchor_monotonic_ns"]
        else:
            try:
                reading = _read_engine(url)
                readings.append(dataclasses.replace(reading, t_ns=reading.t_ns - anchor_ns))
            except OSError:
                pass
        time.sleep(POLL_S)
    return readings


def _raw_at(scrapes: Sequence[Mapping[str, Any]], name: str, t_ns: int) -> dict[str, float]:
    """The engine's own value of each series of ``name`` at the last scrape at or before
    ``t_ns``, by its labels."""
    last = [s for s in scrapes if s.get("available") and s["t_ns"] <= t_ns][-1]
    return {
        json.dumps(x.get("labels", {}), sort_keys=True): float(x["value"])
        for x in last["series"]
        if x["name"] == name
    }


def _raw_increase(scrapes, name: str, lo_ns: int, hi_ns: int) -> dict[str, float]:
    start, end = _raw_at(scrapes, name, lo_ns), _raw_at(scrapes, name, hi_ns)
    return {key: value - start.get(key, 0.0) for key, value in end.items()}


def _edges_ns(soak: SoakSummary, index: int) -> tuple[int, int]:
    assert soak.level_start_s is not None
    w = soak.windows[index]
    return (round((soak.level_start_s + w.start_s) * 1e9),
            round((soak.level_start_s + w.end_s) * 1e9))  # fmt: skip


def _shares_by_layer(increase: Mapping[str, float]) -> dict[str, np.ndarray]:
    layers: dict[str, list[tuple[str, float]]] = {}
    for key, value in increase.items():
        labels = json.loads(key)
        layers.setdefault(labels["layer"], []).append((labels["expert"], value))
    out = {}
    for layer, counts in layers.items():
        tokens = np.array([v for _, v in sorted(counts, key=lambda c: int(c[0]))])
        out[layer] = tokens / tokens.sum()
    return out


@pytest.mark.timing
def test_the_reference_soak_counts_what_the_engine_counted(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        run = pool.submit(moeperf, runs, "run", "soak-reference", *RELAXED, *SHORT, timeout=240)
        readings = _watch(runs, run)
        result = run.result()
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "soak (c=8): verdicts" in result.stdout
    store = RunStore(runs)
    reader = store.open(store.run_ids()[-1])
    summary = reader.summary()
    assert isinstance(summary, ServingSummary) and summary.soak is not None
    soak, scrapes = summary.soak, reader.server_metrics()
    spec = load_spec("soak-reference", SHORT[1::2]).serving
    assert spec.soak is not None and spec.load.duration_s is not None
    measured_s = spec.load.duration_s - spec.load.warmup_s - spec.load.cooldown_s
    assert len(soak.windows) == int(measured_s / spec.soak.window_s) == 5

    # KV usage: every window's mean is the mean of the engine's gauge over the scrapes in
    # it, and the small cache keeps it well above zero.
    for i, w in enumerate(soak.windows):
        lo, hi = _edges_ns(soak, i)
        inside = [
            x["value"] for s in scrapes if s.get("available") and lo <= s["t_ns"] < hi
            for x in s["series"] if x["name"] == mn.TARGET_KV_USAGE.name
        ]  # fmt: skip
        assert w.kv_usage_ratio is not None and 0 < w.kv_usage_ratio <= 1
        assert w.kv_usage_ratio == pytest.approx(float(np.mean(inside)))

    # Preemptions: per window, the engine's own counter's increase between the window's
    # edges; over the level, what this test read from the engine itself.
    for i, w in enumerate(soak.windows):
        lo, hi = _edges_ns(soak, i)
        raw = _raw_increase(scrapes, td.TARGET_PREEMPTIONS.name, lo, hi)
        assert w.preemptions == sum(raw.values())
    assert soak.preemptions_total is not None and soak.preemptions_total > 0
    # The last reading came after the load (nothing running or waiting) and the first
    # before it: together, the engine's whole count.
    assert readings and readings[0].busy == readings[-1].busy == 0, (readings[:2], readings[-2:])
    own = readings[-1].preemptions - readings[0].preemptions
    level = next(iter(summary.scenarios.values())).target_counters
    assert level is not None and level.preemptions == own
    assert soak.preemptions_total <= own

    # Expert tokens: per window, the increase of the engine's per-expert counters; the
    # drift, recomputed here from the first and last windows' raw counters, is the summary's.
    for i, w in enumerate(soak.windows):
        raw = _raw_increase(scrapes, mn.TARGET_EXPERT_TOKENS.name, *_edges_ns(soak, i))
        assert w.expert_tokens == sum(raw.values()) and w.expert_tokens > 0
    first = _shares_by_layer(_raw_increase(scrapes, mn.TARGET_EXPERT_TOKENS.name,
                                           *_edges_ns(soak, 0)))  # fmt: skip
    last = _shares_by_layer(_raw_increase(scrapes, mn.TARGET_EXPERT_TOKENS.name,
                                          *_edges_ns(soak, len(soak.windows) - 1)))  # fmt: skip
    drift = [0.5 * float(np.abs(first[k] - last[k]).sum()) for k in sorted(first, key=int)]
    assert soak.expert_drift_by_layer == pytest.approx(drift)

    # A clean engine under a steady load: every verdict has its figures and none is found.
    # KV usage held near full by preemptions is level, and every block is freed once the
    # load stops (the engine's own gauge, read here after it).
    assert readings[-1].kv_usage == 0 and max(r.kv_usage for r in readings) > 0
    outcomes = {v.name: v.outcome for v in soak.verdicts}
    assert set(outcomes.values()) == {"not found"}, soak.verdicts
    assert soak.memory_source == "process"
    assert all(w.rss_bytes is not None and w.rss_samples > 0 for w in soak.windows)
    assert summary.soak.kv_usage.windows == len(soak.windows)
