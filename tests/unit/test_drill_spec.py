"""``[drill]`` is checked at the edge: every mistake names itself, with what is valid."""

from __future__ import annotations

import pytest

from moeperf.specs import validate_spec
from moeperf.suites.errors import SpecError

BASE = {
    "name": "drill",
    "target": {"kind": "synthetic"},
    "load": {"mode": "poisson", "levels": [5], "duration_s": 10},
}


def _spec(faults, **drill):
    return {**BASE, "drill": {"faults": faults, **drill}}


def test_the_shipped_drill_spec_validates():
    from moeperf.specs import load_spec

    spec = load_spec("faults").serving
    assert spec.drill is not None
    assert [f.kind for f in spec.drill.faults] == [
        "kill", "stall", "http_error", "reset", "malformed", "drop_pool",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("faults", "message"),
    [
        ([{"kind": "stall", "at_s": 1}], "needs for_s"),
        ([{"kind": "kill", "at_s": 1, "for_s": 2}], "for_s is for stall"),
        ([{"kind": "hook", "at_s": 1}], "needs command"),
        ([{"kind": "reset", "at_s": 1, "for_s": 1, "status": 503}], "status is for http_error"),
        ([{"kind": "http_error", "at_s": 1, "for_s": 1, "status": 404}], "status"),
        ([{"kind": "explode", "at_s": 1}], "kill"),
        (
            [{"kind": "stall", "at_s": 1, "for_s": 3}, {"kind": "reset", "at_s": 2, "for_s": 1}],
            r"before faults\[0\]",
        ),
        ([{"kind": "stall", "at_s": 9, "for_s": 3}], "raise load.duration_s"),
    ],
)
def test_a_wrong_fault_is_named(faults, message):
    with pytest.raises(SpecError, match=message):
        validate_spec(_spec(faults), "drill.toml")


def test_a_fault_the_target_cannot_take_is_refused_with_the_valid_kinds():
    data = _spec([{"kind": "kill", "at_s": 1}])
    data["target"] = {"kind": "url", "url": "http://127.0.0.1:9"}
    with pytest.raises(
        SpecError, match="cannot be injected into a url target; valid kinds there: drop_pool, hook"
    ):
        validate_spec(data, "drill.toml")


def test_a_drill_runs_one_level():
    data = _spec([{"kind": "stall", "at_s": 1, "for_s": 1}])
    data["load"] = {"mode": "poisson", "levels": [1, 2], "duration_s": 10}
    with pytest.raises(SpecError, match="one load level"):
        validate_spec(data, "drill.toml")


def test_the_shipped_reference_drill_validates():
    from moeperf.specs import load_spec

    spec = load_spec("faults-reference").serving
    assert spec.drill is not None and spec.target.kind == "reference"
    assert [f.kind for f in spec.drill.faults] == ["kill", "stall"]


def test_a_resolved_spec_validates_again_whatever_its_engine():
    # The manifest stores the resolved spec, defaults included: [locust] among them.
    for engine in ("asyncio", "locust"):
        loaded = validate_spec({**BASE, "load": {"levels": [2], "engine": engine}}, "x")
        dumped = loaded.serving.model_dump(mode="json")
        assert validate_spec(dumped, "resolved").serving.load.engine == engine
    with pytest.raises(SpecError, match=r"\[locust\] is for load.engine = 'locust'"):
        validate_spec({**BASE, "locust": {"ui": True}}, "x")
    with pytest.raises(SpecError, match="runs closed-loop levels"):
        validate_spec({**BASE, "load": {"mode": "poisson", "levels": [5], "engine": "locust"}}, "x")
