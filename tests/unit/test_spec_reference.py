"""Specs of target.kind = "reference": the [target.reference] knobs are checked against the
target's own config (imported lazily), bad ones exit 2 naming the field, a missing torch
names the install command, and the harness resolves the model's tokenizer and describes
the target for the manifest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from moeperf import cli
from moeperf.specs import load_spec
from moeperf.suites import reference_install as spec
from moeperf.suites.errors import SpecError
from moeperf.suites.serving.embedded.reference import (
    default_model_dir,
    describe,
    host_threads,
    target_config,
    threads_rule,
    usable_cores,
    with_reference_defaults,
)
from moeperf.suites.serving.target_spec import reference_config
from moeperf.targets.serving.config import ReferenceTargetConfig


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "spec.toml"
    path.write_text('name = "t"\n[target]\nkind = "reference"\n' + text)
    return str(path)


def test_knobs_reach_the_target_config_and_defaults_are_the_targets(tmp_path):
    s = load_spec(write(tmp_path, "[target.reference]\nmtp_tokens = 2\nthreads = 1\n")).serving
    config = reference_config(s.target.reference)
    assert isinstance(config, ReferenceTargetConfig)
    assert (config.mtp_tokens, config.threads) == (2, 1)
    assert config.max_running_requests == ReferenceTargetConfig().max_running_requests


def test_knobs_can_be_set_from_the_command_line(tmp_path):
    s = load_spec(write(tmp_path, ""), ["target.reference.enable_prefix_caching=false"]).serving
    assert reference_config(s.target.reference).enable_prefix_caching is False


def test_an_unknown_knob_names_itself_suggests_and_lists_the_valid_ones(tmp_path):
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, "[target.reference]\nmtp_token = 2\n"))
    message = str(info.value)
    assert "target.reference.mtp_token: unknown field" in message
    assert "did you mean 'mtp_tokens'" in message
    assert "max_running_requests" in message and "enable_prefix_caching" in message


def test_a_bad_value_and_a_cross_field_rule_name_the_field(tmp_path):
    with pytest.raises(SpecError, match=r"target\.reference\.mtp_tokens: .*greater than"):
        load_spec(write(tmp_path, "[target.reference]\nmtp_tokens = -1\n"))
    with pytest.raises(SpecError, match=r"target\.reference\.dtype: .*'float32'"):
        load_spec(write(tmp_path, '[target.reference]\ndtype = "int8"\n'))
    too_small = "[target.reference]\nmax_running_requests = 32\nmax_num_batched_tokens = 8\n"
    with pytest.raises(SpecError, match="max_num_batched_tokens must cover"):
        load_spec(write(tmp_path, too_small))


def test_the_cli_exits_2_on_a_bad_knob_before_starting_anything(tmp_path, capsys):
    path = write(tmp_path, "[target.reference]\nblock_sise = 8\n")
    code = cli.main(["--runs-dir", str(tmp_path / "runs"), "run", path])
    assert code == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "target.reference.block_sise: unknown field; did you mean 'block_size'?" in err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_without_torch_a_reference_spec_says_how_to_install_and_others_still_load(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(spec, "torch_installed", lambda: False)
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, ""))
    install = "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"
    assert install in str(info.value) and "pip install '.[reference]'" in str(info.value)
    load_spec("synthetic")  # a synthetic spec needs no torch
    assert cli.main(["--runs-dir", str(tmp_path), "run", write(tmp_path, "")]) == 2
    assert cli.main(["target", "serve", "--port", "0"]) == 2
    assert install in " ".join(capsys.readouterr().err.split())


def test_the_shipped_reference_specs_validate():
    for name in ("reference-sweep", "reference-mtp", "reference-prefix"):
        s = load_spec(name).serving
        assert s.target.kind == "reference"
        reference_config(s.target.reference)


def model_dir(tmp_path: Path) -> Path:
    """A directory that passes for a model directory (the harness reads no weights)."""
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}\n")
    (model / "recipe.json").write_text('{"steps": 3}\n')
    return model


def test_the_shipped_model_is_the_default_and_its_tokenizer_gives_prompt_lengths(tmp_path):
    assert default_model_dir() == Path(spec.__file__).parents[1] / "targets" / "model" / "default"
    s = load_spec(write(tmp_path, "")).serving
    assert with_reference_defaults(s).workload.tokenizer == str(default_model_dir())
    assert (default_model_dir() / "tokenizer.json").is_file()


def test_the_tokenizer_is_the_chosen_models_unless_the_spec_sets_one(tmp_path):
    model = model_dir(tmp_path)
    s = load_spec(write(tmp_path, f'[target.reference]\nmodel_dir = "{model}"\n')).serving
    assert with_reference_defaults(s).workload.tokenizer == str(model.resolve())
    s = load_spec(write(tmp_path, '[workload]\ntokenizer = "server"\n')).serving
    assert with_reference_defaults(s).workload.tokenizer == "server"
    synthetic = load_spec("synthetic").serving
    assert with_reference_defaults(synthetic) is synthetic


def test_a_model_dir_without_a_model_exits_2_before_anything_starts(tmp_path, capsys):
    path = write(tmp_path, f'[target.reference]\nmodel_dir = "{tmp_path / "nothing"}"\n')
    assert cli.main(["--runs-dir", str(tmp_path / "runs"), "run", path]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "is not a model directory (no config.json)" in err
    assert "moeperf target train --out DIR" in err


def test_the_manifest_describes_the_knobs_the_model_dir_and_its_recipe(tmp_path):
    model = model_dir(tmp_path)
    s = load_spec(write(tmp_path, f'[target.reference]\nmodel_dir = "{model}"\n')).serving
    config = target_config(s)
    assert config["model_dir"] == str(model.resolve())
    assert config["mtp_tokens"] == ReferenceTargetConfig().mtp_tokens
    json.dumps(config)  # the child gets it as --config JSON
    described = describe(config, "http://127.0.0.1:1")
    assert described["kind"] == "reference" and described["config"] == config
    assert described["model_dir"] == str(model.resolve())
    assert len(described["recipe_sha256"]) == 64
    assert describe({**config, "model_dir": str(tmp_path)}, "u")["recipe_sha256"] is None


def test_the_embedded_engine_takes_half_the_cores_unless_the_spec_sets_threads():
    # Measured on the 2-core host: one torch thread beat torch's default of two, since the
    # harness runs on the same cores (docs/getting-started/first-benchmark.md).
    assert [host_threads(n) for n in (1, 2, 3, 16)] == [1, 1, 1, 8]
    chosen_by_host = load_spec("default").serving
    assert target_config(chosen_by_host)["threads"] == host_threads(usable_cores())
    assert f"half of the {usable_cores()} usable cores" in threads_rule(chosen_by_host)
    chosen = load_spec("default", ["target.reference.threads=3"]).serving
    assert target_config(chosen)["threads"] == 3
    assert threads_rule(chosen) == "set by the spec (target.reference.threads)"
    described = describe(target_config(chosen), "http://127.0.0.1:1", threads_rule(chosen))
    assert described["threads_rule"] == threads_rule(chosen)
