"""A manifest's target as a typed record (collectors/target_description.py): each field read
from what the runner wrote, None where an older run or a target does not say."""

from __future__ import annotations

from moeperf.collectors.target_description import TargetDescription


def test_an_embedded_reference_target_reads_whole():
    described = TargetDescription.of(
        {
            "kind": "reference",
            "url": "http://127.0.0.1:40001",
            "model": "moeperf-tiny-moe",
            "api": "completions",
            "config": {"threads": 1, "mtp_tokens": 0},
            "threads_rule": "half the usable cores",
        }
    )
    assert described == TargetDescription(
        kind="reference",
        url="http://127.0.0.1:40001",
        model="moeperf-tiny-moe",
        api="completions",
        threads=1,
        threads_rule="half the usable cores",
    )
    # An embedded target's port was gone when the run ended: its kind names it.
    assert described.label == "reference moeperf-tiny-moe"


def test_a_url_target_is_named_by_its_url_and_an_engine_by_its_version():
    described = TargetDescription.of(
        {"kind": "url", "url": "http://gpu-1:8000", "model": "m", "engine_version": "0.11.0"}
    )
    assert described.label == "http://gpu-1:8000 m"
    assert described.engine_version == "0.11.0"
    assert TargetDescription.of({"engine": "vllm"}).engine_version == "vllm"


def test_what_an_older_run_lacks_is_none():
    assert TargetDescription.of({}) == TargetDescription()
    assert TargetDescription.of(None).label == ""
    simulated = TargetDescription.of({"kind": "synthetic", "simulated": True, "config": {}})
    assert simulated.simulated and simulated.threads is None
    # A config whose threads is not a count is not read as one.
    assert TargetDescription.of({"config": {"threads": "2"}}).threads is None
