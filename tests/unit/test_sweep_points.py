"""The prompt lengths of a [sweep]: log spacing, the context limit, and bad specs."""

from __future__ import annotations

from typing import Any

import pytest

from moeperf.specs import validate_spec
from moeperf.suites.errors import SpecError, UsageError
from moeperf.suites.serving.mode_spec import InputTokensSweep
from moeperf.suites.serving.workload.sweep import (
    CHAT_TEMPLATE_ALLOWANCE,
    ContextLimit,
    context_limit,
    log_spaced,
    sweep_points,
)

TARGET = ContextLimit(2048, "target: max_model_len at URL")
UNKNOWN = ContextLimit(None, "not stated by the target")


def test_lengths_are_log_spaced_with_both_ends():
    assert log_spaced(16, 2047, 4) == (16, 81, 406, 2047)
    assert log_spaced(8, 8, 5) == (8,)
    assert log_spaced(1, 3, 10) == (1, 2, 3)  # rounding makes equal ones: kept once


def test_context_means_the_limit_less_the_output_tokens():
    sweep = InputTokensSweep(min=16, max="context", points=4)
    points = sweep_points(sweep, TARGET, 1, "completions")
    assert [p.input_tokens for p in points] == [16, 81, 406, 2047]
    assert all(p.sent for p in points)


def test_chat_keeps_room_for_the_template():
    sweep = InputTokensSweep(min=16, max="context", points=2)
    (_, longest) = sweep_points(sweep, TARGET, 32, "chat")
    assert longest.input_tokens == 2048 - 32 - CHAT_TEMPLATE_ALLOWANCE


def test_listed_lengths_past_the_limit_are_not_available():
    sweep = InputTokensSweep(values=[4096, 64, 2016, 2017])
    points = sweep_points(sweep, TARGET, 32, "completions")
    assert [p.input_tokens for p in points] == [64, 2016, 2017, 4096]
    assert [p.sent for p in points] == [True, True, False, False]
    reason = points[-1].not_available
    assert reason == (
        "not available from this target: 4096 prompt + 32 output tokens exceed its context "
        "limit of 2048 tokens (target: max_model_len at URL)"
    )


def test_an_unknown_limit_sends_every_listed_length_but_cannot_be_reached():
    listed = sweep_points(InputTokensSweep(values=[64, 100_000]), UNKNOWN, 1, "completions")
    assert all(p.sent for p in listed)
    with pytest.raises(UsageError, match="states no context limit"):
        sweep_points(InputTokensSweep(max="context"), UNKNOWN, 1, "completions")


def test_a_limit_too_small_for_the_minimum_is_refused():
    with pytest.raises(UsageError, match=r"less than sweep\.input_tokens\.min"):
        sweep_points(
            InputTokensSweep(min=512, max="context"), ContextLimit(256, "spec"), 1, "completions"
        )


def test_the_spec_limit_wins_over_the_targets():
    given = InputTokensSweep(context_tokens=1000)
    assert context_limit(given, 2048, "URL").tokens == 1000
    assert context_limit(InputTokensSweep(), 2048, "URL") == TARGET
    assert context_limit(InputTokensSweep(), None, "URL") == UNKNOWN


BASE: dict[str, Any] = {
    "name": "s",
    "target": {"kind": "synthetic"},
    "workload": {"output_tokens": {"dist": "fixed", "mean": 1}},
    "sweep": {"input_tokens": {"values": [16, 64]}},
}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"workload": {"input_tokens": {"mean": 64}}}, "remove workload.input_tokens"),
        ({"workload": {"shared_prefix_tokens": 8}}, "remove workload.shared_prefix_tokens"),
        ({"capacity": {"ttft_p99_s": 1.0}}, "cannot be combined"),
        ({"sweep": {"input_tokens": {"values": [16, 16]}}}, "lists a length twice"),
        ({"sweep": {"input_tokens": {"min": 64, "max": 32}}}, "is below"),
        (
            {"workload": {"output_tokens": {"dist": "uniform", "mean": 8, "spread": 4}},
             "sweep": {"input_tokens": {}}},
            "set workload.output_tokens.max",
        ),
    ],
)  # fmt: skip
def test_bad_sweeps_are_refused_with_what_to_do(change, message):
    data = {**BASE, **change}
    if "workload" in change and "output_tokens" not in change["workload"]:
        data["workload"] = {**BASE["workload"], **change["workload"]}
    with pytest.raises(SpecError, match=message):
        validate_spec(data, "s.toml")


def test_a_good_sweep_validates():
    spec = validate_spec(BASE, "s.toml").serving
    assert spec.sweep is not None and spec.sweep.input_tokens.values == [16, 64]
    assert spec.max_output_tokens == 1
