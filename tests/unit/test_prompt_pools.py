"""A level's prompts: a pool large enough where its count is known before the run, each
worker its own part of it, and the repeats of a level counted and said."""

from __future__ import annotations

import dataclasses

import pytest
from rich.console import Console

from moeperf.collectors.serving_records import (
    ScenarioSummary,
    SelfWatchSummary,
    WorkerSummary,
    empty_scenario,
)
from moeperf.reports.terminal.workload_tables import reuse_table as terminal_reuse_table
from moeperf.reports.workload_blocks import reuse_table
from moeperf.specs import validate_spec
from moeperf.suites.serving.level_plan import LevelOutcome, plan_level
from moeperf.suites.serving.load.validity import LevelVerdict
from moeperf.suites.serving.run_notes import pool_note, repeats_note
from moeperf.suites.serving.schedule import pool_size
from moeperf.suites.serving.spec import ServingSpec
from moeperf.suites.serving.workload.repeats import prompt_identities, repeated_prompts
from moeperf.suites.serving.workload.sources import Prompt

WATCH = SelfWatchSummary(0.0, 0.0, 0.0, 0, 0.1, 1.0)


def _spec(load: dict, **workload) -> ServingSpec:
    data = {
        "suite": "serving",
        "name": "t",
        "target": {"kind": "synthetic"},
        "workload": {"kind": "random", "num_prompts": 8, **workload},
        "load": load,
    }
    spec = validate_spec(data, "test").serving
    assert spec is not None
    return spec


def _report(worker: int, sent: int, first: int | None) -> WorkerSummary:
    return WorkerSummary(worker, "c=2", sent, sent, 0, WATCH, first)


def _positions(plans, size: int) -> list[set[int]]:
    return [
        {(plan.prompt_offset + k) % size for k in range(plan.max_requests)}
        for plan in plans.values()
    ]


def test_the_workers_of_a_count_bound_level_take_apart_prompts():
    # 5 requests from 5 prompts on 2 workers (3 and 2): an even split of the pool put the
    # second worker at prompt 2, which the first one sent too.
    spec = _spec({"levels": [2], "max_requests": 5, "warmup_s": 0.0})
    plans = plan_level(spec, 2, 0, 2, 0, 5)
    first, second = _positions(plans, 5)
    assert not first & second and len(first | second) == 5
    # With the place kept from level to level, the next level goes on from there.
    later = plan_level(spec, 2, 1, 2, 0, 20, cursor=5)
    assert [p.prompt_offset for p in later.values()] == [5, 8]
    assert all(not p.resume_prompts for p in later.values())


def test_an_open_loop_level_gives_each_worker_as_many_prompts_as_arrivals():
    spec = _spec({"mode": "poisson", "levels": [40], "duration_s": 2.0})
    plans = list(plan_level(spec, 40, 0, 3, 0, 500).values())
    counts = [len(p.arrivals_s) for p in plans]
    assert [p.prompt_offset for p in plans] == [0, counts[0], counts[0] + counts[1]]


def test_pool_sizes_follow_what_a_level_can_send():
    count = _spec({"levels": [1, 4], "max_requests": 20, "warmup_s": 0.0})
    assert pool_size(count, [1, 4]) == 20
    assert pool_size(count, [1], extra=4) == 24  # a capacity probe's warm-up
    # Open loop: 40 requests/s for 3 s, 120 expected, 4 sigma (44) and 16 to spare.
    rate = _spec({"mode": "poisson", "levels": [10, 40], "duration_s": 3.0})
    assert pool_size(rate, [10, 40]) == 120 + 43 + 16
    assert pool_size(rate, [10, 40]) > pool_size(rate, [10])
    # Closed loop by time: what the target answers, not known before; counted instead.
    time = _spec({"levels": [4], "duration_s": 3.0})
    assert pool_size(time, [4]) == 8
    # workload.cache = "reuse": the same prompts again, as asked.
    reuse = _spec({"levels": [4], "max_requests": 20, "warmup_s": 0.0}, cache="reuse")
    assert pool_size(reuse, [4]) == 8
    assert pool_note(count, [8, 20]) == (
        "Prompts: workload.num_prompts = 8 raised to as many as 20 a pool, so that no level "
        "sends a prompt twice: a level sends at most load.max_requests = 20."
    )
    assert pool_note(time, [8, 8]) == ""


def test_repeats_are_the_requests_beyond_the_distinct_prompts_sent():
    prompts = [Prompt(text, 1, 1) for text in "abcdefgh"]
    identities = prompt_identities(prompts)
    # Two workers whose runs overlap by 2 (positions 4 and 5), and one that went round.
    assert repeated_prompts([_report(0, 6, 0), _report(1, 4, 4)], identities) == 2
    assert repeated_prompts([_report(0, 11, 6)], identities) == 3
    assert repeated_prompts([_report(0, 3, 0), _report(1, 0, None)], identities) == 0
    # A pool that holds a prompt twice (a small dataset, cycled): told apart by text.
    doubled = prompt_identities([Prompt(text, 1, 1) for text in "abcabc"])
    assert repeated_prompts([_report(0, 6, 0)], doubled) == 3
    # A trace's requests bring their own prompts: not counted.
    assert repeated_prompts([_report(0, 5, None)], identities) is None


def _outcome(unique: bool, sent: int, repeated: int) -> LevelOutcome:
    name = "c=4 unique" if unique else "c=4"
    return LevelOutcome(name, 4, [_report(0, sent, 0)], LevelVerdict(name, "ok"),
                        unique=unique, repeated_prompts=repeated, pool_prompts=128)  # fmt: skip


def test_the_note_says_a_control_with_repeats_is_no_clean_control():
    spec = _spec({"levels": [4], "duration_s": 8.0}, prefix={"count": 4, "tokens": 16})
    assert repeats_note(spec, _outcome(True, 176, 48)) == (
        "Control level c=4 unique repeated 48 of its 176 prompts (sent again within the "
        "level; its pool held 128 distinct prompts): its hit rate is not a clean control; "
        "raise workload.num_prompts to at least 176."
    )
    assert repeats_note(spec, _outcome(False, 176, 48)).startswith(
        "Level c=4 repeated 48 of its 176 prompts (sent again within the level; its pool "
        "held 128 distinct prompts): a target with a prefix cache may serve the repeats"
    )
    assert repeats_note(spec, _outcome(True, 100, 0)) == ""


def test_the_reuse_tables_show_a_levels_repeats_beside_its_hit_rate():
    def entry(unique: bool, repeated: int) -> ScenarioSummary:
        return dataclasses.replace(
            empty_scenario(), level=4.0, unique=unique, repeated_prompts_total=repeated,
            harness=(_report(0, 100, 0), _report(1, 76, 64)),
        )  # fmt: skip

    scenarios = {"c=4": entry(False, 0), "c=4 unique": entry(True, 48)}
    table = reuse_table(scenarios)
    assert table is not None
    row = table.frame.iloc[0]
    assert row["hit rate without"].endswith(" (48 of 176 prompts repeated)")
    assert "repeated" not in row["hit rate with"]
    console = Console(width=250, record=True)
    console.print(terminal_reuse_table(scenarios))
    assert "(48 of 176 prompts repeated)" in console.export_text()


def test_a_ramp_deals_the_streams_first_sends_round_robin_over_the_workers():
    # 5 streams over 1 s on 2 workers (3 and 2): first sends at 0, 0.2, ..., 0.8 s, the
    # even steps to the first worker, so each worker's streams span the whole ramp.
    spec = _spec({"levels": [5], "ramp_s": 1.0, "warmup_s": 1.0, "duration_s": 4.0})
    plans = plan_level(spec, 5, 0, 2, 0, 8)
    assert [plan.concurrency for plan in plans.values()] == [3, 2]
    assert plans[0].first_sends_s == pytest.approx((0.0, 0.4, 0.8))
    assert plans[1].first_sends_s == pytest.approx((0.2, 0.6))
    # Without a ramp every stream starts at once.
    plain = plan_level(_spec({"levels": [5]}), 5, 0, 2, 0, 8)
    assert all(plan.first_sends_s == () for plan in plain.values())
