"""Simulation suite specs: a layout that does not divide the model or the devices, an
unknown model or cluster, a typo: each a SpecError naming it (exit 2), before anything runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from moeperf.cli import main
from moeperf.specs import load_spec
from moeperf.suites.errors import SpecError
from moeperf.targets.cluster_sim import routing

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
        ('cluster = "tpu"', "unknown cluster 'tpu'; valid: h100, h800, b200, gb200, seed-000"),
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


MIXTRAL_SMALL = {
    "model_type": "mixtral", "hidden_size": 1024, "num_hidden_layers": 8,
    "num_attention_heads": 16, "num_key_value_heads": 4, "num_local_experts": 8,
    "num_experts_per_tok": 2, "intermediate_size": 2048, "vocab_size": 32000,
    "tie_word_embeddings": False,
}  # fmt: skip
REPLAY = Path(__file__).parent.parent / "data" / "routing_replay_example.jsonl"


def test_replayed_routing_is_the_recorded_loads(tmp_path, capsys):
    """Skew "replay" reads the reference trainer's replay file: the hottest rank's share of
    each micro-batch and layer is the file's, looped, and a run completes on it."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps(MIXTRAL_SMALL))
    spec_text = f"""
suite = "simulation"
name = "replay"
[sim]
iterations = 3
skews = ["replay", "calm"]
policies = ["keep-all"]
baseline = "keep-all"
replay_file = "{REPLAY}"
[[job]]
name = "mixtral-ish"
model = "{config}"
devices = 16
pipeline = 2
expert = 4
global_batch = 32
"""
    path = tmp_path / "replay.toml"
    path.write_text(spec_text)
    spec = load_spec(str(path)).simulation
    counts = spec.sim.replay_counts()
    assert counts is not None and counts.shape[1:] == (4, 8)
    share = routing.replay_share(counts, 4, (2, 3), 4)
    # micro-batch 4 replays line 4 mod lines; rank r holds experts 2r, 2r + 1
    line = counts[4 % len(counts)]
    expected = line.reshape(4, 4, 2).sum(-1).max(-1) / line.sum(-1)
    np.testing.assert_allclose(share.reshape(-1, 4)[4], expected)
    runs = tmp_path / "runs"
    assert main(["--runs-dir", str(runs), "run", str(path)]) == 0
    assert "mixtral-ish/keep-all/replay" in capsys.readouterr().out

    with pytest.raises(SpecError, match=r"needs sim\.replay_file"):
        load_spec(str(path), ["sim.replay_file=''"])
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({**MIXTRAL_SMALL, "num_local_experts": 16}))
    other = tmp_path / "wrong.toml"
    other.write_text(spec_text.replace(str(config), str(wrong)))
    with pytest.raises(SpecError, match="replay_file has 8 experts per layer, the model 16"):
        load_spec(str(other))
