"""The target's counters per load level, from scrapes shaped as the run's scraper stores them:
real expositions (the reference server's own collector, the synthetic target's metrics, an
SGLang page) read by the dialect adapters and windowed per level."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from moeperf.collectors.sources.counter_window import CounterWindow
from moeperf.collectors.sources.target_metrics import read_exposition
from moeperf.collectors.target_counters import TargetCounters, level_target_counters
from moeperf.targets.serving.engine.api import EngineCounters, EngineStats
from moeperf.targets.serving.metrics import ReferenceMetrics
from moeperf.targets.synthetic.metrics import SyntheticMetrics
from moeperf.targets.synthetic.slots import StreamSlots


class Scrapes:
    """Records as ``suites.serving.observe.scraper`` writes them: a baseline without a
    window, then ``start_window`` (a scrape that closes the old window) per level."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self._counters = CounterWindow()
        self._window: str | None = None

    def scrape(self, text: str) -> None:
        dialect, samples = read_exposition(text)
        series = [w.to_dict() for w in self._counters.observe(samples)]
        self.records.append(
            {
                "t_ns": len(self.records),
                "available": True,
                "dialect": dialect,
                "window": self._window,
                "series": series,
            }
        )

    def start_window(self, text: str, name: str) -> None:
        self.scrape(text)
        self._counters.start_window()
        self._window = name


class Reference:
    """The reference server's /metrics page (its real collector) over a mutable engine."""

    def __init__(self, mtp_tokens: int = 2) -> None:
        self.counters = EngineCounters(
            spec_decode_accepted_per_position=[0] * mtp_tokens, expert_tokens=[[0, 0]]
        )
        self.kv_used = 0
        self._metrics = ReferenceMetrics(self._stats, CollectorRegistry())

    def _stats(self) -> EngineStats:
        return EngineStats(1, 0, self.kv_used, 100, dataclasses.replace(self.counters))

    def page(self) -> str:
        return generate_latest(self._metrics.registry).decode()

    def work(self, *, steps: int, drafts: int, accepted: list[int], kv_used: int) -> None:
        c = self.counters
        c.steps += steps
        c.spec_decode_drafts += drafts
        c.spec_decode_draft_tokens += drafts * len(accepted)
        c.spec_decode_accepted_tokens += sum(accepted)
        c.spec_decode_accepted_per_position = [
            a + b for a, b in zip(c.spec_decode_accepted_per_position, accepted, strict=True)
        ]
        c.generation_tokens += drafts + sum(accepted)
        self.kv_used = kv_used


def test_reference_levels_get_their_own_increases_and_gauges():
    target, scrapes = Reference(), Scrapes()
    target.counters.steps, target.counters.preemptions = 500, 4  # before the run: not its
    scrapes.scrape(target.page())  # the run's baseline
    scrapes.start_window(target.page(), "c=1")
    target.work(steps=10, drafts=10, accepted=[8, 4], kv_used=20)
    scrapes.scrape(target.page())
    target.work(steps=10, drafts=10, accepted=[6, 2], kv_used=40)
    target.counters.prefix_cache_queries, target.counters.prefix_cache_hits = 400, 100
    scrapes.scrape(target.page())
    target.kv_used = 0  # drained: the closing scrape's gauge is not the level's
    scrapes.start_window(target.page(), "c=4")
    target.work(steps=5, drafts=20, accepted=[20, 10], kv_used=90)
    target.counters.preemptions += 3
    scrapes.scrape(target.page())
    scrapes.scrape(target.page())  # the run's last scrape (stop)

    levels = level_target_counters(scrapes.records)
    assert set(levels) == {"c=1", "c=4"}
    one, four = levels["c=1"], levels["c=4"]
    assert one.dialect == "reference" and one.gauge_scrapes == 2
    assert (one.spec_drafts, one.spec_draft_tokens, one.spec_accepted_tokens) == (20, 40, 20)
    assert one.spec_acceptance_ratio == 0.5
    assert one.spec_acceptance_by_position == (0.7, 0.3)
    assert one.spec_tokens_per_step == 2.0  # 1 + 20 accepted / 20 drafts
    assert one.engine_steps == 20 and one.generation_tokens == 40
    assert one.generation_tokens_per_engine_step == 2.0
    assert (one.kv_usage_mean_ratio, one.kv_usage_max_ratio) == (pytest.approx(0.3), 0.4)
    assert one.preemptions == 0  # the 4 before the run are not the level's
    assert one.prefix_cache_hit_ratio == 0.25
    assert four.spec_acceptance_by_position == (1.0, 0.5)
    assert four.spec_tokens_per_step == 2.5
    assert four.preemptions == 3
    assert (four.kv_usage_mean_ratio, four.kv_usage_max_ratio) == (0.9, 0.9)
    assert four.prefix_cache_queries == 0 and four.prefix_cache_hit_ratio is None


def test_mtp_off_is_zero_drafts_not_absent():
    target, scrapes = Reference(mtp_tokens=0), Scrapes()
    scrapes.scrape(target.page())
    scrapes.start_window(target.page(), "c=1")
    target.counters.steps += 8
    scrapes.scrape(target.page())
    scrapes.scrape(target.page())
    (level,) = level_target_counters(scrapes.records).values()
    assert level.spec_drafts == 0
    assert level.spec_tokens_per_step is None and level.spec_acceptance_ratio is None
    assert level.spec_acceptance_by_position is None
    assert level.engine_steps == 8


def test_synthetic_target_has_none_of_them():
    metrics = SyntheticMetrics(CollectorRegistry(), StreamSlots(0))
    scrapes = Scrapes()
    page = lambda: generate_latest(metrics.registry).decode()  # noqa: E731
    scrapes.scrape(page())
    scrapes.start_window(page(), "c=2")
    metrics.generation_tokens.inc(64)
    scrapes.scrape(page())
    scrapes.scrape(page())
    level = level_target_counters(scrapes.records)["c=2"]
    # It exports its running and waiting requests and its token counts, none of the
    # engine's counters: no cached prompt tokens, no latency histograms.
    assert level == TargetCounters(
        dialect="synthetic",
        gauge_scrapes=1,
        generation_tokens=64,
        running_max=0.0,
        waiting_max=0.0,
        prompt_tokens=0.0,
    )


SGLANG_PAGE = """\
# TYPE sglang:token_usage gauge
sglang:token_usage{{tp_rank="0"}} {usage}
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{{tp_rank="0"}} {hit}
# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{{tp_rank="0"}} {accept}
# TYPE sglang:num_retracted_requests_total counter
sglang:num_retracted_requests_total{{tp_rank="0"}} {retracted}
"""


def test_sglang_ratios_are_the_mean_of_its_gauges_during_the_level():
    scrapes = Scrapes()

    def page(usage: float, hit: float, accept: float, retracted: int) -> str:
        return SGLANG_PAGE.format(usage=usage, hit=hit, accept=accept, retracted=retracted)

    scrapes.scrape(page(0, 0, 0, 5))
    scrapes.start_window(page(0, 0, 0, 5), "c=8")
    scrapes.scrape(page(0.2, 0.5, 2.5, 6))
    scrapes.scrape(page(0.4, 0.3, 3.5, 7))
    scrapes.scrape(page(0.0, 0.0, 1.0, 7))  # after the level drained: not a level gauge
    level = level_target_counters(scrapes.records)["c=8"]
    assert level.dialect == "sglang" and level.gauge_scrapes == 2
    assert level.spec_tokens_per_step == pytest.approx(3.0)
    assert level.spec_acceptance_ratio is None and level.spec_drafts is None
    assert level.prefix_cache_hit_ratio == pytest.approx(0.4)
    assert level.prefix_cache_queries is None
    assert level.kv_usage_mean_ratio == pytest.approx(0.3)
    assert level.preemptions == 2


def test_a_level_shorter_than_the_interval_reads_its_closing_scrape():
    target, scrapes = Reference(), Scrapes()
    scrapes.scrape(target.page())
    scrapes.start_window(target.page(), "c=1")
    target.work(steps=2, drafts=2, accepted=[1, 0], kv_used=10)
    scrapes.scrape(target.page())
    level = level_target_counters(scrapes.records)["c=1"]
    assert level.gauge_scrapes == 0 and level.kv_usage_mean_ratio == 0.1
    assert level.spec_tokens_per_step == 1.5


def test_unreadable_targets_and_the_baseline_give_no_levels():
    records = [
        {"t_ns": 0, "available": False, "reason": "HTTP 404", "url": "http://x/metrics"},
        {"t_ns": 1, "available": True, "dialect": "reference", "window": None, "series": []},
    ]
    assert level_target_counters(records) == {}


def test_kv_blocks_in_use_are_the_highest_usage_times_the_blocks_the_target_has():
    scrapes = Scrapes()
    page = (
        "# TYPE reference_kv_cache_usage_ratio gauge\nreference_kv_cache_usage_ratio {}\n"
        "# TYPE reference_kv_cache_blocks gauge\nreference_kv_cache_blocks 1024\n"
        "# TYPE reference_requests_running gauge\nreference_requests_running {}\n"
        "# TYPE reference_requests_waiting gauge\nreference_requests_waiting {}\n"
    )
    scrapes.scrape(page.format(0.0, 0, 0))
    scrapes.start_window(page.format(0.0, 0, 0), "in=2048 c=1")
    scrapes.scrape(page.format(0.125, 1, 0))
    scrapes.scrape(page.format(0.25, 2, 3))
    scrapes.scrape(page.format(0.0, 0, 0))  # closing, after the level drained
    level = level_target_counters(scrapes.records)["in=2048 c=1"]
    assert level.kv_usage_max_ratio == 0.25
    assert level.kv_blocks_total == 1024
    assert level.kv_blocks_used_max == 256
    assert (level.running_max, level.waiting_max) == (2, 3)
