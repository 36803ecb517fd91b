"""The target's own counters per level in a run's summary and printed output, from real
runs: the embedded reference target with MTP and prefix caching on, and the synthetic
target, which has neither (nor a KV cache)."""

from __future__ import annotations

from typing import Any

import pytest

from moeperf.cli import main
from moeperf.collectors.serving_records import ServingSummary
from moeperf.collectors.store import RunStore
from moeperf.collectors.target_counters import NOT_AVAILABLE
from moeperf.reports.terminal.levels import target_counters_line
from moeperf.suites.serving.runner import run_serving
from moeperf.suites.serving.spec import ServingSpec

pytestmark = pytest.mark.slow

# Short levels, frequent scrapes (several during a level), and thresholds this test does not
# check (the 2-core host's client may be busy: the counters are the target's own).
COMMON: dict[str, Any] = {
    "load": {"levels": [2], "duration_s": 3.0, "warmup_s": 0.5, "cooldown_s": 0.0},
    "export": {"live_metrics": False, "scrape_interval_s": 0.25},
    "harness": {"max_loop_lag_p99_s": 5.0, "max_cpu_fraction": 1.0},
}


def summary_of(tmp_path, data: dict[str, Any]) -> ServingSummary:
    spec = ServingSpec.model_validate({"name": "counters", **COMMON, **data})
    store = RunStore(tmp_path / "runs")
    summary = store.open(run_serving(spec, spec.model_dump(mode="json"), store)).summary()
    assert isinstance(summary, ServingSummary)
    return summary


@pytest.mark.timeout(300)
def test_reference_target_counters_per_level(tmp_path):
    summary = summary_of(
        tmp_path,
        {
            "target": {
                "kind": "reference",
                "reference": {
                    "mtp_tokens": 2,
                    "enable_prefix_caching": True,
                    "max_running_requests": 4,
                },
            },
            # A shared prefix: the prefix cache has something to hit.
            "workload": {
                "num_prompts": 16,
                "shared_prefix_tokens": 32,
                "input_tokens": {"dist": "fixed", "mean": 48},
                "output_tokens": {"dist": "fixed", "mean": 16},
            },
        },
    )
    entry = summary.scenarios["c=2"]
    c = entry.target_counters
    assert c is not None and c.dialect == "reference" and c.gauge_scrapes >= 1
    assert c.spec_drafts and c.spec_drafts > 0
    assert c.spec_acceptance_ratio is not None and 0 <= c.spec_acceptance_ratio <= 1
    assert c.spec_acceptance_by_position is not None
    assert len(c.spec_acceptance_by_position) == 2
    assert all(0 <= a <= 1 for a in c.spec_acceptance_by_position)
    # A later draft position is accepted only after every earlier one.
    assert c.spec_acceptance_by_position[0] >= c.spec_acceptance_by_position[1]
    assert c.spec_tokens_per_step is not None and c.spec_tokens_per_step >= 1
    assert c.generation_tokens_per_engine_step is not None
    assert c.generation_tokens_per_engine_step >= 1
    assert c.prefix_cache_hit_ratio is not None and 0 < c.prefix_cache_hit_ratio <= 1
    assert c.kv_usage_mean_ratio is not None and c.kv_usage_max_ratio is not None
    assert 0 <= c.kv_usage_mean_ratio <= c.kv_usage_max_ratio <= 1
    # 2 streams of 48 + 16 tokens fill a few blocks of the default KV cache: none is preempted.
    assert c.preemptions == 0
    # The server counted at least the measured requests' tokens (warm-up ones too).
    assert c.generation_tokens is not None and c.generation_tokens >= entry.output_tokens
    line = target_counters_line("c=2", entry)
    assert "tokens/verify step" in line and "prefix-cache hit rate" in line
    assert NOT_AVAILABLE not in line


@pytest.mark.timeout(120)
def test_synthetic_target_counters_are_not_available(tmp_path, capsys):
    spec = tmp_path / "synthetic-counters.toml"
    spec.write_text(
        'name = "synthetic-counters"\n[target]\nkind = "synthetic"\n'
        "[load]\nlevels = [2]\nduration_s = 1.5\nwarmup_s = 0.25\ncooldown_s = 0.0\n"
        "[export]\nlive_metrics = false\nscrape_interval_s = 0.25\n"
        "[harness]\nmax_loop_lag_p99_s = 5.0\nmax_cpu_fraction = 1.0\n"
    )
    assert main(["--runs-dir", str(tmp_path / "runs"), "run", str(spec)]) == 0
    printed = capsys.readouterr().out
    # What the target does not count is said once for the run, not per level.
    expected = (
        f"target counters (synthetic): MTP, KV cache, preemptions, prefix cache: {NOT_AVAILABLE}"
    )
    assert printed.count(expected) == 1
    summary = RunStore(tmp_path / "runs").open("latest").summary()
    assert isinstance(summary, ServingSummary)
    c = summary.scenarios["c=2"].target_counters
    assert c is not None and c.dialect == "synthetic"
    assert c.spec_tokens_per_step is None and c.kv_usage_mean_ratio is None
    assert c.preemptions is None and c.prefix_cache_hit_ratio is None
    assert c.generation_tokens is not None and c.generation_tokens > 0
