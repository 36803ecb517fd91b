"""``[plan]`` in a serving spec: the planner's prediction for a sweep, its inputs checked
when the spec loads (exit 2 before anything runs), and its numbers for a url target from
a config and deployment of the user's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from moeperf.cli import main
from moeperf.specs import load_spec
from moeperf.suites.errors import SpecError
from moeperf.suites.serving.spec import ServingSpec
from moeperf.suites.serving.sweep_plan import resolve_plan, sweep_plan

SWEEP = "[sweep.input_tokens]\nvalues = [1000, 2000]\n"
QWEN = "tests/data/plan/qwen3-30b-a3b.json"


def write(tmp_path, text: str) -> str:
    path = tmp_path / "spec.toml"
    path.write_text('name = "t"\n' + text)
    return str(path)


def test_plan_needs_a_sweep(tmp_path):
    with pytest.raises(SpecError, match=r"\[plan\] draws .* it needs \[sweep\]"):
        load_spec(write(tmp_path, '[target]\nkind = "reference"\n[plan]\n'))


def test_a_url_target_must_name_its_model_and_deployment(tmp_path):
    text = '[target]\nkind = "url"\nurl = "http://127.0.0.1:9/v1"\n' + SWEEP + "[plan]\n"
    with pytest.raises(SpecError, match=r"needs plan\.model"):
        load_spec(write(tmp_path, text))


def test_a_config_with_a_missing_field_exits_2_naming_it(tmp_path, capsys):
    config = json.loads(Path(QWEN).read_text())
    del config["num_experts"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    text = (
        '[target]\nkind = "url"\nurl = "http://127.0.0.1:9/v1"\n' + SWEEP
        + f'[plan]\nmodel = "{tmp_path / "config.json"}"\n'
        + "[plan.deployment]\ndevices = 1\nmemory_per_device_gib = 80.0\n"
        + "max_context_tokens = 4096\nmax_running_requests = 8\n"
    )  # fmt: skip
    code = main(["--runs-dir", str(tmp_path / "runs"), "run", write(tmp_path, text)])
    err = capsys.readouterr().err
    assert code == 2
    assert "[plan]" in err and "num_experts" in err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_parallel_sizes_that_do_not_divide_the_model_exit_2(tmp_path):
    text = (
        '[target]\nkind = "url"\nurl = "http://127.0.0.1:9/v1"\n' + SWEEP
        + f'[plan]\nmodel = "{QWEN}"\n'
        + "[plan.deployment]\ndevices = 3\ntp = 3\nmemory_per_device_gib = 80.0\n"
        + "max_context_tokens = 4096\nmax_running_requests = 8\n"
    )  # fmt: skip
    with pytest.raises(SpecError, match=r"attention heads \(32\) are not divisible by tp \(3\)"):
        load_spec(write(tmp_path, text))


def test_a_url_targets_fit_is_counted_in_the_memory_the_planner_leaves(tmp_path):
    text = (
        '[target]\nkind = "url"\nurl = "http://127.0.0.1:9/v1"\n' + SWEEP
        + f'[plan]\nmodel = "{QWEN}"\nblock_tokens = 16\n'
        + "[plan.deployment]\ndevices = 1\nmemory_per_device_gib = 80.0\n"
        + "max_context_tokens = 4096\nmax_running_requests = 8\n"
    )  # fmt: skip
    spec = load_spec(write(tmp_path, text)).spec
    assert isinstance(spec, ServingSpec)
    resolved = resolve_plan(spec)
    predicted = sweep_plan(resolved, [1000, 2000], 100)
    # Qwen3-30B-A3B: 48 layers x 2 (K, V) x 4 kv heads x 128 x 2 bytes (bf16).
    assert predicted.kv_bytes_per_token == 48 * 2 * 4 * 128 * 2 == 98_304
    free = resolved.plan.free_for_cache
    assert predicted.cache_bytes == free > 0
    blocks = free // (16 * 98_304)
    assert predicted.cache_blocks == blocks
    first, second = predicted.points
    assert (first.tokens_per_sequence, first.blocks_per_sequence) == (1100, 69)
    assert (second.tokens_per_sequence, second.blocks_per_sequence) == (2100, 132)
    assert first.fit_sequences == blocks // 69 and second.fit_sequences == blocks // 132
    assert predicted.state_bytes_per_sequence == 0
