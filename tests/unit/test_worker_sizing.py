"""How many load workers a run has: enough for the highest level it can reach (a capacity
search's max_level, a fit's max_streams), and the note that says how they were sized."""

from __future__ import annotations

import os

from moeperf.specs import validate_spec
from moeperf.suites.serving.spec import ServingSpec
from moeperf.suites.serving.worker_sizing import worker_count, worker_sizing


def _spec(**sections) -> ServingSpec:
    data = {
        "suite": "serving",
        "name": "t",
        "target": {"kind": "synthetic"},
        "load": {"levels": [1], "duration_s": 5.0},
        **sections,
    }
    spec = validate_spec(data, "test").serving
    assert spec is not None
    return spec


CAPACITY = {"capacity": {"start": 1, "max_level": 1024, "ttft_p99_s": 1.0}}


def test_a_capacity_search_gets_the_workers_of_its_max_level_not_of_load_levels():
    spec = _spec(**CAPACITY)
    # One per 128 streams of max_level 1024: 8, as far as this host's cores go.
    assert worker_count(spec) == min(len(os.sched_getaffinity(0)), 8)
    sizing = worker_sizing(spec, cores=16)
    assert sizing.workers == 8
    assert sizing.note() == (
        "8 load workers: sized for the search's max_level 1024 streams, 128 streams per "
        "worker (load.workers = 'auto': one per 128 streams, at most the 16 usable cores)."
    )


def test_the_note_says_when_the_cores_cap_the_workers():
    sizing = worker_sizing(_spec(**CAPACITY), cores=2)
    assert sizing.workers == 2
    assert sizing.note().startswith(
        "2 load workers: sized for the search's max_level 1024 streams, 512 streams per worker"
    )


def test_open_loop_and_explicit_workers_and_a_fit_search():
    rate = _spec(load={"mode": "poisson", "levels": [50, 250], "duration_s": 5.0})
    assert worker_sizing(rate, cores=16).note() == (
        "3 load workers: sized for load.levels' highest level 250 requests/s, 83.33 "
        "requests/s per worker (load.workers = 'auto': one per 100 requests/s, at most the "
        "16 usable cores)."
    )
    fixed = _spec(load={"levels": [1], "duration_s": 5.0, "workers": 2}, **CAPACITY)
    assert worker_sizing(fixed, cores=16).note() == (
        "2 load workers: sized for the search's max_level 1024 streams, 512 streams per "
        "worker (load.workers = 2)."
    )
    fit = _spec(
        workload={"kind": "random"},
        sweep={"input_tokens": {"values": [64]}, "fit": {"max_streams": 300, "probe_s": 10.0}},
    )
    sizing = worker_sizing(fit, cores=16)
    assert (sizing.workers, sizing.reach) == (3, "the fit's max_streams")
    one = worker_sizing(_spec(), cores=16)
    assert one.note() == (
        "1 load worker: sized for load.levels' highest level 1 stream, 1 stream per worker "
        "(load.workers = 'auto': one per 128 streams, at most the 16 usable cores)."
    )


def test_one_worker_for_small_levels_goes_unsaid_and_a_search_is_said():
    small = worker_sizing(_spec(), cores=16)
    assert small.workers == 1 and not small.worth_a_note  # every small run's: no note
    searched = worker_sizing(_spec(capacity={"start": 1, "max_level": 64, "ttft_p99_s": 1.0}))
    assert searched.workers == 1 and searched.worth_a_note
    assert searched.note().startswith("1 load worker: sized for the search's max_level 64 streams")
