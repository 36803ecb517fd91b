"""training-dist specs: what a layout decides is refused in [trainer], layouts that do not
fit the model or the batch and drills that cannot happen are spec errors (exit 2)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from moeperf.specs import load_spec, validate_spec
from moeperf.suites.errors import SpecError

BASE = {
    "suite": "training-dist",
    "name": "t",
    "trainer": {
        "init_from": "none", "steps": 4, "microbatches": 4,
        "model": {"hidden_size": 64, "num_heads": 4, "num_kv_heads": 2, "num_experts": 4,
                  "num_layers": 2},
    },
    "matrix": {"layouts": [{"name": "ep2", "ep": 2}, {"name": "pp2", "pp": 2}]},
}  # fmt: skip


def spec_with(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = copy.deepcopy(BASE)
    for path, value in changes.items():
        where: dict[str, Any] = data
        *parents, last = path.split("__")
        for key in parents:
            where = where.setdefault(key, {})
        where[last] = value
    return data


def test_the_shipped_spec_is_valid():
    spec = load_spec("training-dist").training_dist
    assert [x.name for x in spec.matrix.layouts] == ["single", "ep2", "pp2", "dp2"]
    assert [x.name for x in spec.drilled()] == ["ep2"]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"trainer__expert_parallel": 2}, "trainer.expert_parallel: set by matrix.layouts"),
        ({"trainer__pipeline_stages": 2}, "trainer.pipeline_stages: set by matrix.layouts"),
        ({"matrix__layouts": [{"name": "ep3", "ep": 3}]}, "ep (3) must divide the model's 4"),
        ({"matrix__layouts": [{"name": "pp3", "pp": 3}]}, "pp (3) must divide the model's 2"),
        ({"matrix__layouts": [{"name": "w", "ep": 2, "dp": 4}]}, "multiple of ep x dp (8)"),
        ({"matrix__layouts": [{"name": "a"}, {"name": "a", "ep": 2}]}, "lists a more than once"),
        ({"faults": {"kill_rank": 2, "after_step": 1}}, "faults.kill_rank 2: layout 'ep2'"),
        ({"faults": {"kill_rank": 0, "after_step": 3}}, "give at most 2"),
        ({"faults": {"kill_rank": 0, "after_step": 1, "layouts": ["nope"]}},
         "faults.layouts nope: not in matrix.layouts"),
        ({"matrix__layouts": [{"name": "x", "tp": 2}]}, "tp"),
    ],
)  # fmt: skip
def test_bad_specs_name_the_field(changes, message):
    with pytest.raises(SpecError) as caught:
        validate_spec(spec_with(**changes), "t.toml")
    assert message in str(caught.value)


def test_the_drill_runs_only_in_the_layouts_it_names():
    spec = validate_spec(
        spec_with(faults={"kill_rank": 1, "after_step": 1, "layouts": ["pp2"]}), "t.toml"
    ).training_dist
    assert [x.name for x in spec.drilled()] == ["pp2"]
