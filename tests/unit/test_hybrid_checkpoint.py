"""The hybrid (Qwen3-Next) model's directories: save and load, the shipped
``targets/model/hybrid`` against transformers, the architecture check, and its quick recipe."""

from __future__ import annotations

import json
import math
import shlex
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from moeperf.targets.model import train as train_module
from moeperf.targets.model.checkpoint import (
    CONFIG_FILE,
    ModelDirError,
    default_model_dir,
    hybrid_model_dir,
    load_mixtral_dir,
    load_model_dir,
    param_counts,
    save_model_dir,
    verify_model_dir,
)
from moeperf.targets.model.config import MoEConfig
from moeperf.targets.model.hybrid import HybridMoETransformer
from moeperf.targets.model.hybrid_config import HybridConfig
from moeperf.targets.model.model import MoETransformer
from moeperf.targets.model.train import TrainResult, main, parse_args, train
from moeperf.targets.model.train_recipe import (
    HYBRID_RECIPE,
    QUICK_HYBRID_CONFIG,
    QUICK_HYBRID_RECIPE,
    QUICK_RECIPE,
    TrainRecipe,
    architecture,
    build_model,
)

RECIPE = replace(QUICK_HYBRID_RECIPE, steps=20, eval_every=10)
SUPPORTED = "mixtral (MixtralForCausalLM), qwen3_next (Qwen3NextForCausalLM)"


@pytest.fixture(scope="module")
def trained() -> TrainResult:
    return train(RECIPE, log=lambda line: None)


# -- the recipes ----------------------------------------------------------------------------


def test_recipes_build_the_model_their_config_names():
    assert isinstance(build_model(QUICK_HYBRID_RECIPE.model), HybridMoETransformer)
    assert isinstance(build_model(MoEConfig(num_layers=1)), MoETransformer)
    assert architecture(HYBRID_RECIPE.model) == "qwen3_next"
    assert architecture(MoEConfig()) == "mixtral"
    assert HYBRID_RECIPE.model == HybridConfig() and HYBRID_RECIPE.seq_len == 256
    assert parse_args(["--out", "x"]).arch == "mixtral"
    assert parse_args(["--out", "x", "--arch", "hybrid"]).arch == "hybrid"
    with pytest.raises(SystemExit):
        parse_args(["--out", "x", "--arch", "llama"])


def test_param_counts_read_any_mtp_form():
    hybrid = HybridMoETransformer(QUICK_HYBRID_CONFIG)  # mtp: one module
    assert hybrid.mtp is not None
    counts = param_counts(hybrid)
    assert counts["mtp"] == sum(p.numel() for p in hybrid.mtp.parameters()) > 0
    assert counts["total"] == counts["main"] + counts["mtp"]
    routed = sum(p.numel() for n, p in hybrid.model.named_parameters() if ".experts." in n)
    assert counts["main_experts"] == routed  # the shared expert is not a routed one
    assert param_counts(HybridMoETransformer(replace(QUICK_HYBRID_CONFIG, mtp_depth=0)))["mtp"] == 0
    moe = MoETransformer(MoEConfig(num_layers=1, mtp_depth=0))  # mtp: an empty ModuleList
    assert param_counts(moe)["mtp"] == 0


@pytest.mark.slow
def test_quick_hybrid_recipe_trains_and_its_loss_drops(trained):
    history = trained.summary["history"]
    assert [h["step"] for h in history] == [10, 20]
    uniform = math.log(RECIPE.model.vocab_size)
    assert history[0]["train_loss"] < uniform + 0.1
    assert history[-1]["train_loss"] < history[0]["train_loss"] - 0.3
    assert history[-1]["eval_loss"] < uniform - 0.3
    assert history[-1]["eval_mtp_loss"] < uniform - 0.3
    assert 0.0 <= history[-1]["eval_mtp_top1_agreement"] <= 1.0
    assert trained.summary["recipe"]["model"]["architecture"] == "qwen3_next"
    json.dumps(trained.summary)


@pytest.mark.slow
def test_saved_hybrid_dir_reloads_with_identical_weights(trained, tmp_path):
    out = save_model_dir(
        trained.model, trained.tokenizer, tmp_path, trained.summary, dtype=torch.float32
    )
    assert json.loads((out / CONFIG_FILE).read_text())["model_type"] == "qwen3_next"
    verify_model_dir(out)
    model, tokenizer = load_model_dir(out)
    assert isinstance(model, HybridMoETransformer)
    assert model.config == RECIPE.model
    expected = trained.model.state_dict()
    assert model.state_dict().keys() == expected.keys()
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, expected[name]), name
    text = "Return the number of items in a container."
    assert tokenizer.encode(text) == trained.tokenizer.encode(text)
    recipe = json.loads((out / "recipe.json").read_text())
    assert recipe["param_counts"] == param_counts(model)
    with pytest.raises(ModelDirError, match="needs mixtral"):
        load_mixtral_dir(out)


# -- config.json's architecture -------------------------------------------------------------


def _copy_with_config(tmp_path: Path, **changes: object) -> Path:
    copy = tmp_path / "copy"
    shutil.copytree(default_model_dir(), copy)
    (copy / "SHA256SUMS").unlink()  # config.json changes: nothing to verify against
    config = json.loads((copy / CONFIG_FILE).read_text())
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    (copy / CONFIG_FILE).write_text(json.dumps(config))
    return copy


def test_an_unsupported_model_type_names_it_and_the_supported_ones(tmp_path):
    copy = _copy_with_config(tmp_path, model_type="llama", architectures=["LlamaForCausalLM"])
    with pytest.raises(ModelDirError) as exc:
        load_model_dir(copy)
    message = str(exc.value)
    assert str(copy) in message
    assert "'llama'" in message and "LlamaForCausalLM" in message
    assert SUPPORTED in message


def test_a_config_without_model_type_is_unsupported(tmp_path):
    copy = _copy_with_config(tmp_path, model_type=None)
    with pytest.raises(ModelDirError, match=r"model_type None .*supported: mixtral"):
        load_model_dir(copy)


# -- the shipped hybrid directory ----------------------------------------------------------


@pytest.fixture(scope="module")
def shipped() -> Path:
    path = hybrid_model_dir()
    if not (path / "model.safetensors").is_file():
        pytest.fail(f"the shipped model directory {path} is missing: see its recipe.json")
    return path


def test_shipped_hybrid_dir_verifies_and_loads(shipped):
    # Shipped as package data: the installed package has it (an installed wheel, under tox).
    assert shipped.parent == default_model_dir().parent and shipped.name == "hybrid"
    verify_model_dir(shipped)
    model, tokenizer = load_model_dir(shipped)
    assert isinstance(model, HybridMoETransformer)
    assert model.config == HYBRID_RECIPE.model
    recipe = json.loads((shipped / "recipe.json").read_text())
    assert recipe["recipe"]["model"]["architecture"] == "qwen3_next"
    assert recipe["param_counts"] == param_counts(model)
    assert recipe["command"].startswith("python -m moeperf.targets.model.train --arch hybrid")
    assert recipe["final"]["eval_mtp_top1_agreement"] > 0.3  # what speculation will accept
    # The trainer trains its tokenizer deterministically: the same one as the default model's.
    assert (shipped / "tokenizer.json").read_bytes() == (
        default_model_dir() / "tokenizer.json"
    ).read_bytes()
    assert tokenizer.vocab_size == model.config.vocab_size


@pytest.mark.slow
def test_shipped_hybrid_dir_matches_transformers_qwen3_next(shipped):
    transformers = pytest.importorskip("transformers")
    ours, tokenizer = load_model_dir(shipped)
    theirs = transformers.AutoModelForCausalLM.from_pretrained(shipped, dtype=torch.float32)
    assert type(theirs).__name__ == "Qwen3NextForCausalLM"
    ids = tokenizer.encode("The built-in function len() returns the number of items in a list.")
    assert 8 <= len(ids) <= 64
    idx = torch.tensor([ids])
    with torch.no_grad():
        mine, ref = ours(idx).logits, theirs.eval()(idx).logits
    assert torch.allclose(mine, ref, atol=1e-4, rtol=0), (mine - ref).abs().max()
    # a trained model: its next-token guesses beat uniform on real text
    loss = torch.nn.functional.cross_entropy(mine[0, :-1], idx[0, 1:])
    assert loss.item() < math.log(ours.config.vocab_size) - 1.0


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ([], TrainRecipe()),
        (["--quick"], QUICK_RECIPE),
        (["--arch", "mixtral", "--quick"], QUICK_RECIPE),
        (["--arch", "hybrid"], HYBRID_RECIPE),
        (["--arch", "hybrid", "--quick", "--steps", "2"], replace(QUICK_HYBRID_RECIPE, steps=2)),
    ],
)
def test_cli_arch_picks_the_base_recipe(flags, expected, monkeypatch, tmp_path):
    calls: list[tuple[TrainRecipe, Path, str | None]] = []

    def fake_train_model(recipe: TrainRecipe, out: Path, command: str | None = None) -> dict:
        calls.append((recipe, out, command))
        return {}

    monkeypatch.setattr(train_module, "train_model", fake_train_model)
    argv = ["--out", str(tmp_path), *flags]
    assert main(argv) == 0
    assert calls == [
        (expected, tmp_path, shlex.join(["python", "-m", "moeperf.targets.model.train", *argv]))
    ]


def test_target_serve_of_an_unsupported_architecture_exits_2_naming_it(tmp_path, capsys):
    from moeperf.cli import main

    copy = _copy_with_config(tmp_path, model_type="llama", architectures=["LlamaForCausalLM"])
    assert main(["target", "serve", "--model", str(copy), "--port", "0"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "unsupported architecture" in err and "'llama'" in err and SUPPORTED in err
