"""Our model directories load in Hugging Face transformers and compute the same thing there.

A randomly initialized model checks the weight layout exactly (float32); the shipped default
directory checks what users get: its checksums, its logits in transformers, its tokenizer and
chat template through ``AutoTokenizer``.
"""

import json
import math
from pathlib import Path

import pytest
import torch

from moeperf.targets.model import MoEConfig, MoETransformer
from moeperf.targets.model.__main__ import greedy_generate
from moeperf.targets.model.checkpoint import (
    WEIGHTS_FILE,
    WEIGHTS_INDEX_FILE,
    default_model_dir,
    hybrid_model_dir,
    load_model_dir,
    save_model_dir,
    verify_model_dir,
)
from moeperf.targets.model.tokenizer import ChatTokenizer, train_tokenizer

transformers = pytest.importorskip("transformers")

SENTENCE = (
    "Return a new list containing all items from the iterable in ascending order. "
    "A custom key function can be supplied to customize the sort order."
)
MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "What does len() return?"},
]


def hf_model(model_dir: Path):
    return transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def random_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cfg = MoEConfig(
        vocab_size=300, hidden_size=64, expert_hidden_size=96, num_layers=2, num_heads=4,
        num_kv_heads=2, num_experts=4, top_k=2, max_position=128, mtp_depth=1,
    )  # fmt: skip
    torch.manual_seed(0)
    model = MoETransformer(cfg)
    for p in model.parameters():  # sharper than the init, so routing and logits vary a lot
        torch.nn.init.normal_(p, std=0.1)
    tokenizer = train_tokenizer([SENTENCE] * 10, vocab_size=cfg.vocab_size)
    out = tmp_path_factory.mktemp("random_model")
    return save_model_dir(model, tokenizer, out, {"note": "random"}, dtype=torch.float32)


@pytest.mark.slow
def test_random_float32_model_matches_transformers(random_model_dir):
    ours, _ = load_model_dir(random_model_dir)
    theirs = hf_model(random_model_dir)
    assert type(theirs).__name__ == "MixtralForCausalLM"
    idx = torch.randint(ours.config.vocab_size, (3, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = theirs(idx).logits
        got = ours(idx).logits
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


@pytest.fixture(scope="module")
def default_dir() -> Path:
    path = default_model_dir()
    if not (path / "model.safetensors").is_file():
        pytest.fail(f"the shipped model directory {path} is missing: see its recipe.json")
    return path


def test_default_dir_matches_its_checksums(default_dir):
    verify_model_dir(default_dir)
    files = {p.name for p in default_dir.iterdir()}
    assert all((default_dir / name).is_file() for name in files)  # flat: package data
    size_bytes = sum((default_dir / name).stat().st_size for name in files)
    assert size_bytes < 20 * 2**20


@pytest.mark.slow
def test_default_model_matches_transformers_on_a_sentence(default_dir):
    ours, tokenizer = load_model_dir(default_dir)
    theirs = hf_model(default_dir)
    idx = torch.tensor([tokenizer.encode(SENTENCE)])
    with torch.no_grad():
        got = ours(idx).logits
        expected = theirs(idx).logits
    # Both computed in float32 from the same bfloat16 weights: only summation order differs.
    torch.testing.assert_close(got, expected, atol=2e-3, rtol=2e-3)
    assert torch.equal(got.argmax(-1), expected.argmax(-1))
    # Ours in bfloat16, as the engine can serve it: bf16's 8-bit mantissa (~0.4% per
    # rounding) over a handful of layers leaves logits within a few hundredths.
    ours_bf16, _ = load_model_dir(default_dir, dtype=torch.bfloat16)
    with torch.no_grad():
        got_bf16 = ours_bf16(idx).logits.float()
    torch.testing.assert_close(got_bf16, expected, atol=0.25, rtol=0.05)


@pytest.mark.slow
def test_default_model_has_learned_english(default_dir):
    ours, tokenizer = load_model_dir(default_dir)
    ids = torch.tensor([tokenizer.encode(SENTENCE)])
    with torch.no_grad():
        out = ours(ids[:, :-1], ids[:, 1:])
    uniform = math.log(ours.config.vocab_size)  # 8.3 nats
    assert out.loss.item() < 0.6 * uniform
    assert out.mtp_loss.item() < 0.8 * uniform
    recipe = json.loads((default_dir / "recipe.json").read_text())
    assert recipe["final"]["eval_mtp_top1_agreement"] > 0.3  # what speculation will accept


@pytest.mark.slow
def test_default_model_greedy_matches_transformers_generate(default_dir):
    ours, tokenizer = load_model_dir(default_dir)
    theirs = hf_model(default_dir)
    prompt = tokenizer.encode("The return value is")
    new = greedy_generate(ours, prompt, max_new_tokens=12, stop_ids=tokenizer.stop_token_ids)
    with torch.no_grad():  # stops at generation_config.json's eos ids, as ours does
        generated = theirs.generate(
            torch.tensor([prompt]), max_new_tokens=12, do_sample=False,
            pad_token_id=tokenizer.pad_token_id,
        )  # fmt: skip
    assert generated[0, len(prompt) :].tolist() == new


def test_default_tokenizer_loads_in_transformers(default_dir):
    hf = transformers.AutoTokenizer.from_pretrained(default_dir)
    ours = ChatTokenizer.from_dir(default_dir)
    assert (hf.pad_token_id, hf.bos_token_id, hf.eos_token_id) == (0, 1, 2)
    assert hf.encode(SENTENCE, add_special_tokens=False) == ours.encode(SENTENCE)
    assert hf.decode(ours.encode(SENTENCE)) == SENTENCE
    rendered = hf.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    assert rendered == (
        "<|system|>\nYou are terse.<|end|>\n<|user|>\nWhat does len() return?<|end|>\n"
        "<|assistant|>\n"
    )
    assert rendered == ours.render_chat(MESSAGES)
    ids = hf.apply_chat_template(MESSAGES, add_generation_prompt=True)["input_ids"]
    assert ids == ours.apply_chat_template(MESSAGES)
    generation = transformers.GenerationConfig.from_pretrained(default_dir)
    assert generation.eos_token_id == list(ours.stop_token_ids)


def test_the_shipped_models_load_in_transformers_with_nothing_left_over(default_dir):
    # A strict loader (vLLM) refuses keys its model lacks; transformers reports them. The
    # default model's MTP weights live in mtp.safetensors, outside what either reads.
    for path in (default_dir, hybrid_model_dir()):
        _, info = transformers.AutoModelForCausalLM.from_pretrained(
            path, dtype=torch.float32, output_loading_info=True
        )
        assert (info["missing_keys"], info["unexpected_keys"]) == (set(), set()), path
    index = json.loads((default_dir / WEIGHTS_INDEX_FILE).read_text())
    assert set(index["weight_map"].values()) == {WEIGHTS_FILE}
    assert not any(k.startswith("mtp.") for k in index["weight_map"])
    # moeperf's loader still finds the MTP module (it raises on any missing tensor).
    ours, _ = load_model_dir(default_dir)
    assert isinstance(ours, MoETransformer)
    assert sum(p.numel() for p in ours.mtp.parameters()) == 1_084_672  # recipe.json's count
