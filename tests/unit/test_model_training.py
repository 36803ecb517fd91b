"""Training the tiny MoE (targets.model.train) and its model directory (checkpoint)."""

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from moeperf.targets.model.checkpoint import (
    CHECKSUMS_FILE,
    ModelDirError,
    load_model_dir,
    save_model_dir,
    verify_model_dir,
)
from moeperf.targets.model.corpus import Corpus
from moeperf.targets.model.train import TrainResult, main, train
from moeperf.targets.model.train_data import split_documents
from moeperf.targets.model.train_optim import lr_at
from moeperf.targets.model.train_recipe import QUICK_RECIPE, TrainRecipe

# One torch thread: the matmuls are tiny, and on a busy host (two xdist workers on two
# cores) a second thread only spins at barriers. The losses differ from two threads' only
# in float rounding, far inside the margins below (~0.3 nats and more).
RECIPE = replace(QUICK_RECIPE, steps=30, eval_every=10, threads=1)


@pytest.fixture(scope="module")
def trained() -> TrainResult:
    return train(RECIPE, log=lambda line: None)


@pytest.fixture(scope="module")
def model_dir(trained: TrainResult, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("model") / "tiny"
    return save_model_dir(trained.model, trained.tokenizer, out, trained.summary)


# -- the schedule and the split ----------------------------------------------------------


def test_lr_warms_up_linearly_then_decays_to_the_floor():
    recipe = TrainRecipe(steps=100, warmup_steps=10, lr=1e-3, min_lr_ratio=0.1)
    assert lr_at(0, recipe) == pytest.approx(1e-4)
    assert lr_at(9, recipe) == pytest.approx(1e-3)
    assert lr_at(55, recipe) == pytest.approx(0.55e-3)  # halfway down the cosine
    assert lr_at(100, recipe) == pytest.approx(1e-4)
    rates = [lr_at(s, recipe) for s in range(10, 101)]
    assert rates == sorted(rates, reverse=True)


def test_split_holds_out_whole_documents_near_the_fraction():
    documents = tuple(f"document {i} " * (1 + i % 7) for i in range(500))
    corpus = Corpus(documents, sha256="", python_version="3")
    train_docs, held_out = split_documents(corpus, 0.02)
    assert sorted(train_docs + held_out) == sorted(documents)
    held_chars = sum(map(len, held_out))
    assert held_chars / sum(map(len, documents)) == pytest.approx(0.02, abs=0.002)


def test_recipe_rejects_bad_values_naming_them():
    with pytest.raises(ValueError, match="steps must be >= 1"):
        TrainRecipe(steps=0)
    with pytest.raises(ValueError, match=r"seq_len must be <= model\.max_position"):
        replace(QUICK_RECIPE, seq_len=1024)


def test_cli_bad_arguments_exit_2(tmp_path, capsys):
    assert main(["--out", str(tmp_path), "--steps", "0"]) == 2
    assert "steps must be >= 1" in capsys.readouterr().err
    for argv in (["--steps", "3"], ["--out", str(tmp_path), "--steps", "three"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
    assert not any(tmp_path.iterdir())  # nothing written


# -- training ----------------------------------------------------------------------------


@pytest.mark.slow
def test_loss_drops_within_30_steps(trained):
    history = trained.summary["history"]
    assert [h["step"] for h in history] == [10, 20, 30]
    uniform = math.log(RECIPE.model.vocab_size)
    assert history[0]["train_loss"] < uniform + 0.1
    assert history[-1]["train_loss"] < history[0]["train_loss"] - 0.4
    assert history[-1]["eval_loss"] < uniform - 0.5
    assert history[-1]["eval_mtp_loss"] < uniform - 0.5  # the MTP module learns too
    assert 0.0 <= history[-1]["eval_mtp_top1_agreement"] <= 1.0


@pytest.mark.slow
def test_summary_records_the_corpus_and_recipe(trained):
    summary = trained.summary
    assert len(summary["corpus"]["sha256"]) == 64
    assert summary["corpus"]["eval_tokens"] > 0 and summary["corpus"]["train_tokens"] > 0
    assert summary["recipe"]["model"]["mtp_depth"] == 1
    assert summary["tokens_seen"] == RECIPE.steps * RECIPE.batch_size * RECIPE.seq_len
    json.dumps(summary)  # it goes to recipe.json as is


# -- the model directory -----------------------------------------------------------------


@pytest.mark.slow
def test_saved_dir_reloads_with_identical_weights(trained, tmp_path):
    out = save_model_dir(
        trained.model, trained.tokenizer, tmp_path, trained.summary, dtype=torch.float32
    )
    model, tokenizer = load_model_dir(out)
    expected = trained.model.state_dict()
    assert model.state_dict().keys() == expected.keys()
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, expected[name]), name
    text = "Return the number of items in a container."
    assert tokenizer.encode(text) == trained.tokenizer.encode(text)


@pytest.mark.slow
def test_bfloat16_dir_holds_the_rounded_weights(trained, model_dir):
    model, _ = load_model_dir(model_dir, dtype=torch.float32)
    for name, tensor in trained.model.state_dict().items():
        assert torch.equal(model.state_dict()[name], tensor.bfloat16().float()), name
    recipe = json.loads((model_dir / "recipe.json").read_text())
    assert recipe["weights_dtype"] == "bfloat16"
    assert recipe["param_counts"]["total"] == sum(p.numel() for p in model.parameters())
    assert json.loads((model_dir / "config.json").read_text())["torch_dtype"] == "bfloat16"
    generation = json.loads((model_dir / "generation_config.json").read_text())
    assert generation["eos_token_id"] == list(trained.tokenizer.stop_token_ids)


@pytest.mark.slow
def test_checksums_catch_a_changed_file(model_dir, tmp_path):
    verify_model_dir(model_dir)
    listed = (model_dir / CHECKSUMS_FILE).read_text()
    assert {line.split("  ")[1] for line in listed.splitlines()} == {
        p.name for p in model_dir.iterdir() if p.name != CHECKSUMS_FILE
    }
    copy = tmp_path / "copy"
    copy.mkdir()
    for p in model_dir.iterdir():
        (copy / p.name).write_bytes(p.read_bytes())
    weights = bytearray((copy / "model.safetensors").read_bytes())
    weights[-1] ^= 1
    (copy / "model.safetensors").write_bytes(bytes(weights))
    with pytest.raises(ModelDirError, match=r"model\.safetensors does not match SHA256SUMS"):
        verify_model_dir(copy)
    with pytest.raises(ModelDirError, match=r"model\.safetensors"):
        load_model_dir(copy)
    load_model_dir(copy, verify=False)  # a flipped low bit still loads when asked to


@pytest.mark.slow
def test_missing_dir_or_file_is_a_clear_error(model_dir, tmp_path):
    with pytest.raises(ModelDirError, match="does not exist"):
        load_model_dir(tmp_path / "nowhere")
    copy = tmp_path / "copy"
    copy.mkdir()
    for p in model_dir.iterdir():
        if p.name != "tokenizer.json":
            (copy / p.name).write_bytes(p.read_bytes())
    with pytest.raises(ModelDirError, match=r"lacks tokenizer\.json"):
        load_model_dir(copy)
    (copy / "tokenizer.json").write_bytes((model_dir / "tokenizer.json").read_bytes())
    (copy / "recipe.json").unlink()
    with pytest.raises(ModelDirError, match=r"recipe\.json is listed in SHA256SUMS but missing"):
        verify_model_dir(copy)


@pytest.mark.slow
def test_cli_writes_a_loadable_dir(tmp_path, capsys):
    out = tmp_path / "quick"
    argv = ["--out", str(out), "--quick", "--steps", "3", "--eval-every", "3", "--threads", "1"]
    assert main(argv) == 0
    assert "step     3/3" in capsys.readouterr().out
    recipe = json.loads((out / "recipe.json").read_text())
    assert recipe["command"] == (
        f"python -m moeperf.targets.model.train --out {out} --quick --steps 3 --eval-every 3 "
        "--threads 1"
    )
    assert recipe["recipe"]["threads"] == 1
    assert recipe["recipe"]["steps"] == 3
    model, tokenizer = load_model_dir(out)
    assert model.config == QUICK_RECIPE.model
    assert tokenizer.vocab_size == QUICK_RECIPE.model.vocab_size
