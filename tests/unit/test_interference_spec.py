"""[interference]: what it needs of the spec, and the step budget every arm shares."""

from __future__ import annotations

from typing import Any

import pytest

from moeperf.specs import validate_spec
from moeperf.suites.errors import SpecError, UsageError
from moeperf.suites.serving.interference import arm_spec, step_budget

BASE: dict[str, Any] = {
    "name": "i",
    "target": {"kind": "reference"},
    "interference": {"chunked_prefill_sizes": [0, 64], "prefill_input_tokens": 1000},
}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"target": {"kind": "synthetic"}}, "needs target.kind = 'reference'"),
        (
            {"target": {"kind": "reference", "reference": {"chunked_prefill_size": 64}}},
            "remove it",
        ),
        ({"interference": {"chunked_prefill_sizes": [64, 64]}}, "lists a size twice"),
        ({"interference": {"chunked_prefill_sizes": []}}, "at least 1"),
        ({"sweep": {"input_tokens": {"values": [16]}}}, "cannot be combined"),
    ],
)
def test_bad_interference_specs_are_refused(change, message):
    with pytest.raises(SpecError, match=message):
        validate_spec({**BASE, **change}, "i.toml")


def test_every_arm_gets_the_same_budget_and_its_own_chunk():
    spec = validate_spec(BASE, "i.toml").serving
    # A whole 1,000-token prompt beside a decode step of each of the 4 streams.
    assert step_budget(spec) == 1004
    arms = [arm_spec(spec, size, 1004).target.reference for size in (0, 64)]
    assert arms == [
        {"chunked_prefill_size": 0, "max_num_batched_tokens": 1004},
        {"chunked_prefill_size": 64, "max_num_batched_tokens": 1004},
    ]


def test_a_budget_too_small_for_a_whole_prompt_is_refused():
    data = {**BASE, "target": {"kind": "reference", "reference": {"max_num_batched_tokens": 512}}}
    spec = validate_spec(data, "i.toml").serving
    with pytest.raises(UsageError, match="cannot hold a whole 1000-token prompt"):
        step_budget(spec)
