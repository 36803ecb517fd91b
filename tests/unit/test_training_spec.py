"""Training suite specs: every mistake is a SpecError naming the field (exit 2), checked
before anything trains; the matrix expands to named scenarios."""

from __future__ import annotations

import json

import pytest

from moeperf.cli import main
from moeperf.specs import load_spec
from moeperf.suites.errors import SpecError
from moeperf.suites.training.plan import scenarios

BASE = """
suite = "training"
name = "t"
kind = "mfu"

[trainer]
init_from = "none"
mtp = false
seq_len = 32
micro_batch_size = 1
microbatches = 2
steps = 1
"""
MATRIX = """
[matrix]
policies = ["keep-all"]
skews = ["calm"]
"""


def write(tmp_path, trainer: str = "", rest: str = MATRIX, top: str = "") -> str:
    path = tmp_path / "spec.toml"
    path.write_text(BASE.replace('kind = "mfu"', top or 'kind = "mfu"') + trainer + rest)
    return str(path)


def problem(path: str) -> str:
    with pytest.raises(SpecError) as info:
        load_spec(path)
    return " ".join(str(info.value).split())


def test_shipped_training_specs_validate():
    for name in ("training-mfu", "training-oom", "training-oom-long"):
        spec = load_spec(name).training
        assert spec.suite == "training"
        assert scenarios(spec)


def test_matrix_expands_to_named_scenarios(tmp_path):
    rest = """
[matrix]
policies = ["keep-all", "adaptive"]
skews = ["calm", "spiky"]
[[matrix.sizes]]
name = "small"
hidden_size = 128
[[matrix.sizes]]
name = "wide"
expert_hidden_size = 256
"""
    spec = load_spec(write(tmp_path, rest=rest)).training
    found = scenarios(spec)
    assert [s.name for s in found] == [
        f"{p}/{k}/{size}"
        for size in ("small", "wide")
        for p in ("keep-all", "adaptive")
        for k in ("calm", "spiky")
    ]
    small = found[0].config
    assert small.model.hidden_size == 128 and small.model.expert_hidden_size == 128
    assert found[-1].config.model.expert_hidden_size == 256
    assert small.model.mtp_depth == 0  # mtp = false drops the MTP module
    assert small.init_from is None and small.policy == "keep-all" and small.skew == "calm"


def test_unknown_policy_and_skew_list_the_valid_names(tmp_path):
    message = problem(
        write(tmp_path, rest='[matrix]\npolicies = ["keep_all"]\nskews = ["stormy"]\n')
    )
    assert "matrix.policies.0" in message and "'keep-all'" in message and "'adaptive'" in message
    assert "matrix.skews.0" in message and "'spiky'" in message and "'replay'" in message


def test_unknown_fields_name_themselves_and_suggest(tmp_path):
    message = problem(write(tmp_path, "seqlen = 4\n[trainer.model]\nhiden_size = 64\n"))
    assert "trainer.seqlen: unknown field; did you mean 'seq_len'?" in message
    assert "trainer.model.hiden_size: unknown field; did you mean 'hidden_size'?" in message
    sizes = MATRIX + '[[matrix.sizes]]\nname = "s"\nexpert_hiden_size = 64\n'
    message = problem(write(tmp_path, rest=sizes))
    assert "matrix.sizes.0.expert_hiden_size: unknown field" in message
    assert "did you mean 'expert_hidden_size'?" in message


def test_duplicates_and_inconsistent_model_are_refused(tmp_path):
    message = problem(write(tmp_path, rest='[matrix]\npolicies = ["keep-all", "keep-all"]\n'))
    assert "matrix.policies lists keep-all more than once" in message
    message = problem(write(tmp_path, "[trainer.model]\nhidden_size = 100\nnum_heads = 8\n"))
    assert "trainer.model" in message and "multiple of num_heads" in message


def test_the_trainers_own_checks_name_the_scenarios(tmp_path):
    message = problem(write(tmp_path, "[trainer.model]\nmax_position = 16\n"))
    assert "scenario keep-all/calm" in message and "max_position" in message
    message = problem(write(tmp_path, "expert_parallel = 3\n"))
    assert "expert_parallel must divide num_experts" in message


def test_replay_needs_a_readable_file_of_the_models_shape(tmp_path):
    replay = '[matrix]\npolicies = ["keep-all"]\nskews = ["replay"]\n'
    assert "needs trainer.replay_path" in problem(write(tmp_path, rest=replay))
    missing = tmp_path / "nope.jsonl"
    message = problem(write(tmp_path, f'replay_path = "{missing}"\n', rest=replay))
    assert "cannot read it" in message and "nope.jsonl" in message
    wrong = tmp_path / "wrong.jsonl"
    wrong.write_text(json.dumps({"tokens_per_expert": [[1, 1]]}) + "\n")
    message = problem(write(tmp_path, f'replay_path = "{wrong}"\n', rest=replay))
    assert "1 layers; expected 4 layers of 8 token counts" in message
    message = problem(write(tmp_path, f'replay_path = "{wrong}"\n'))
    assert "replay_path is read only when matrix.skews lists 'replay'" in message


def test_budget_rules(tmp_path):
    message = problem(write(tmp_path, "budget_bytes = 1000\n"))
    assert "trainer.budget_bytes: 1,000 is smaller than the weights" in message
    message = problem(write(tmp_path, "budget_bytes = 10_000_000_000\nbudget_ratio = 1.1\n"))
    assert "not both" in message
    assert "needs a budget" in problem(write(tmp_path, top='kind = "oom_rate"'))
    assert "trainer.budget_ratio" in problem(write(tmp_path, "budget_ratio = 0\n"))


def test_interleaving_is_for_the_cpu_and_an_unknown_order_lists_the_valid_ones(tmp_path):
    interleaved = MATRIX + 'order = "interleaved"\n'
    message = problem(write(tmp_path, 'device = "cuda"\n', rest=interleaved))
    assert "matrix.order 'interleaved'" in message and "use 'sequential'" in message
    message = problem(write(tmp_path, rest=MATRIX + 'order = "shuffled"\n'))
    assert "matrix.order" in message and "'sequential'" in message and "'interleaved'" in message


def test_model_table_only_with_random_init(tmp_path):
    path = tmp_path / "spec.toml"
    write(tmp_path, "[trainer.model]\nhidden_size = 128\n")
    path.write_text(path.read_text().replace('init_from = "none"', 'init_from = "default"'))
    assert "trainer.model is used only with init_from = 'none'" in problem(str(path))


def test_cli_exits_2_with_the_message_and_no_run(tmp_path, capsys):
    spec = write(tmp_path, rest='[matrix]\npolicies = ["keep-everything"]\n')
    runs = tmp_path / "runs"
    assert main(["--runs-dir", str(runs), "run", spec]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "matrix.policies.0" in err and "'full-recompute'" in err
    assert not runs.exists()
