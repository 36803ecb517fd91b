"""Simulation suite specs: a layout that does not divide the model or the devices, an
unknown model or cluster, a typo: each a SpecError naming it (exit 2), before anything runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from moeperf.cli import main
from suites.errors import SpecError
from suites.spec import load_spec

JOB = """
suite = "simulation"
name = "t"
[sim]
iterations = 2
[[job]]
name = "small"
model = "moe-188b"
cluster = "h100"
devices = {devices}
pipeline = {pipeline}
expert = {expert}
global_batch = {batch}
"""


def write(tmp_path, devices=64, pipeline=8, expert=8, batch=64, extra="") -> str:
    path = tmp_path / "sim.toml"
    text = JOB.format(devices=devices, pipeline=pipeline, expert=expert, batch=batch)
    path.write_text(text + extra)
    return str(path)


def test_a_valid_spec_builds_every_job():
    loaded = load_spec("training-sim-scale")
    spec = loaded.simulation
    assert [j.config().cluster.devices for j in spec.job] == [128, 512, 2048, 6144, 12288, 12288]


def test_a_layout_that_does_not_divide_names_the_job_and_each_mismatch(tmp_path, capsys):
    path = write(tmp_path, devices=64, pipeline=5, expert=7, batch=10)
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    message = str(caught.value)
    assert "job[0] ('small')" in message
    assert "devices 64 is not a multiple of tensor x pipeline x context" in message
    assert "num_layers 48 is not a multiple of pipeline x virtual_stages = 5 x 1 = 5" in message
    assert "expert 7 must divide num_experts 160" in message
    runs = tmp_path / "runs"
    assert main(["--runs-dir", str(runs), "run", path]) == 2
    assert "expert 7 must divide num_experts 160" in " ".join(capsys.readouterr().err.split())
    assert not runs.exists()


@pytest.mark.parametrize(
    ("extra_line", "expected"),
    [
        ('model = "moe-9t"', "unknown model 'moe-9t'; valid: moe-188b, moe-1.04t"),
        ('cluster = "tpu"', "unknown cluster 'tpu'; valid: h100, h800, seed-000"),
    ],
)
def test_an_unknown_model_or_cluster_lists_the_valid_ones(tmp_path, extra_line, expected):
    key = extra_line.split(" = ")[0]
    path = tmp_path / "sim.toml"
    body = Path(write(tmp_path)).read_text()
    lines = [extra_line if line.startswith(f"{key} = ") else line for line in body.splitlines()]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(SpecError) as caught:
        load_spec(str(path))
    assert expected in str(caught.value)


def test_a_policy_typo_and_a_baseline_not_run_are_named(tmp_path):
    with pytest.raises(SpecError, match=r"sim\.policies"):
        load_spec(write(tmp_path), ["sim.policies=['keep-al']"])
    with pytest.raises(SpecError, match=r"sim\.baseline 'full-recompute' must be one of"):
        load_spec(write(tmp_path), ["sim.policies=['keep-all']"])
