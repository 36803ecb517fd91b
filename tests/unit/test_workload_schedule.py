"""The level schedule: interleaved repeats, controls, and a pool per level when fresh."""

from __future__ import annotations

import pytest

from moeperf.specs import validate_spec
from moeperf.suites.errors import SpecError
from moeperf.suites.serving.schedule import level_schedule, pool_keys, scenario_name
from moeperf.suites.serving.spec import ServingSpec
from moeperf.suites.serving.workload.prompts import PoolKey, pool_seed


def _spec(**workload) -> ServingSpec:
    data = {
        "suite": "serving",
        "name": "t",
        "target": {"kind": "synthetic"},
        "workload": {"kind": "random", **workload},
        "load": {"levels": [1, 4], "repeats": 2, "duration_s": 5.0},
    }
    spec = validate_spec(data, "test").serving
    assert spec is not None
    return spec


def test_repeats_interleave_and_every_fresh_level_has_its_own_pool():
    planned = level_schedule(_spec(), [None])
    names = [p.scenario("concurrency") for p in planned]
    assert names == ["c=1 #1", "c=4 #1", "c=1 #2", "c=4 #2"]
    assert len(set(p.key for p in planned)) == 4
    assert len(pool_keys(planned)) == 4


def test_reuse_shares_one_pool_and_the_control_has_its_own():
    spec = _spec(cache="reuse", prefix={"count": 2, "tokens": 32})
    planned = level_schedule(spec, [None])
    names = [p.scenario("concurrency") for p in planned]
    assert names[:4] == ["c=1 #1", "c=1 unique #1", "c=4 #1", "c=4 unique #1"]
    assert pool_keys(planned) == [PoolKey(None, False, 0), PoolKey(None, True, 0)]


def test_the_first_pool_keeps_the_seed_it_always_had():
    assert pool_seed(7, PoolKey()) == 7
    assert pool_seed(7, PoolKey(input_tokens=100)) == 107  # a sweep length's, as before
    assert pool_seed(7, PoolKey(draw=1)) != pool_seed(7, PoolKey(draw=2))
    assert pool_seed(7, PoolKey(unique=True)) != pool_seed(7, PoolKey())


def test_scenario_names():
    assert scenario_name("trace", 2.0) == "trace x2"
    assert scenario_name("poisson", 0.5, 64, unique=True, repeat=3) == "in=64 rate=0.5 unique #3"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"workload": {"kind": "trace", "trace": {"path": "t.jsonl"}}}, "go together"),
        (
            {"workload": {"conversation": {"turns": 3}}, "target": {"kind": "synthetic",
                                                                    "api": "completions"}},
            "target.api = 'chat'",
        ),
        (
            {"workload": {"conversation": {"turns": 3}}, "load": {"mode": "poisson"},
             "target": {"kind": "synthetic", "api": "chat"}},
            "load.mode = 'concurrency'",
        ),
        ({"workload": {"prefix": {"tokens": 8}, "shared_prefix_tokens": 8}}, "keep one"),
        ({"workload": {"kind": "dataset", "dataset_path": "d", "prefix": {"tokens": 8}}},
         "kind = 'random'"),
        ({"load": {"repeats": 2}, "capacity": {"ttft_p99_s": 1.0}}, "load.repeats"),
    ],
)  # fmt: skip
def test_workload_spec_errors_name_the_fix(data, message):
    base = {"suite": "serving", "name": "t", "target": {"kind": "synthetic"}}
    with pytest.raises(SpecError, match=message):
        validate_spec({**base, **data}, "test")


def test_a_trace_level_measures_every_request():
    data = {
        "suite": "serving",
        "name": "t",
        "target": {"kind": "synthetic"},
        "workload": {"kind": "trace", "trace": {"path": "t.jsonl"}},
        "load": {"mode": "trace", "levels": [1, 2]},
    }
    spec = validate_spec(data, "test").serving
    assert spec is not None
    assert (spec.load.warmup_s, spec.load.cooldown_s, spec.load.count_bound) == (0, 0, False)
