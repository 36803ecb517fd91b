"""The tiny MoE (targets.model.model), its tokenizer and its training text."""

import math

import pytest
import torch
import torch.nn.functional as F

from moeperf.targets.model import MoEConfig, MoETransformer, corpus_cache
from moeperf.targets.model.corpus import load_corpus, parse_corpus, stdlib_files
from moeperf.targets.model.moe import MoE
from moeperf.targets.model.tokenizer import SPECIAL_TOKENS, ChatTokenizer, train_tokenizer

TINY = MoEConfig(
    vocab_size=128, hidden_size=32, expert_hidden_size=48, num_layers=2, num_heads=4,
    num_kv_heads=2, num_experts=4, top_k=2, max_position=64, mtp_depth=1,
)  # fmt: skip


def tiny_model(cfg: MoEConfig = TINY, seed: int = 0) -> MoETransformer:
    torch.manual_seed(seed)
    return MoETransformer(cfg).eval()


def random_ids(batch: int, seq_len: int, vocab: int = TINY.vocab_size, seed: int = 1):
    return torch.randint(vocab, (batch, seq_len), generator=torch.Generator().manual_seed(seed))


# -- the model ---------------------------------------------------------------------------


def test_forward_shapes():
    model = tiny_model()
    idx = random_ids(3, 10)
    out = model(idx, idx)
    assert out.logits.shape == (3, 10, TINY.vocab_size)
    assert out.hidden.shape == (3, 10, TINY.hidden_size)
    assert out.tokens_per_expert.shape == (TINY.num_layers, TINY.num_experts)
    assert out.tokens_per_expert.dtype == torch.int64
    assert out.aux_loss.shape == out.loss.shape == out.mtp_loss.shape == ()


def test_untrained_loss_is_near_uniform():
    # std-0.02 init gives near-uniform logits: cross-entropy ~ ln(V).
    idx = random_ids(2, 16)
    out = tiny_model()(idx, idx)
    assert out.loss.item() == pytest.approx(math.log(TINY.vocab_size), abs=0.05)
    assert out.mtp_loss.item() == pytest.approx(math.log(TINY.vocab_size), abs=0.05)


def test_attention_is_causal():
    model = tiny_model()
    idx = random_ids(1, 12)
    changed = idx.clone()
    changed[0, 8:] = (changed[0, 8:] + 1) % TINY.vocab_size
    with torch.no_grad():
        a, b = model(idx).logits, model(changed).logits
    torch.testing.assert_close(a[:, :8], b[:, :8])
    assert not torch.allclose(a[:, 8:], b[:, 8:])


def naive_moe(moe: MoE, x: torch.Tensor) -> torch.Tensor:
    """Mixtral's MoE one token at a time: softmax, top-k, renormalize, weighted sum."""
    rows = []
    for token in x:
        probs = F.softmax(moe.gate(token), dim=-1)
        weights, chosen = probs.topk(moe.top_k)
        weights = weights / weights.sum()
        pairs = zip(weights, chosen, strict=True)
        rows.append(sum(w * moe.experts[int(e)](token) for w, e in pairs))
    return torch.stack(rows)


def test_grouped_moe_equals_per_token_loop():
    torch.manual_seed(0)
    moe = MoE(TINY, layer=0)
    for p in moe.parameters():  # larger weights than the init, so routing is decisive
        torch.nn.init.normal_(p, std=0.3)
    x = torch.randn(37, TINY.hidden_size)
    with torch.no_grad():
        grouped, routing = moe(x)
        expected = naive_moe(moe, x)
    torch.testing.assert_close(grouped, expected, atol=1e-5, rtol=1e-5)
    assert routing.tokens_per_expert.sum().item() == 37 * TINY.top_k
    assert (routing.tokens_per_expert > 0).sum() >= 2  # the check covered several experts


def test_tokens_per_expert_sums_to_tokens_times_top_k():
    idx = random_ids(4, 9)
    out = tiny_model()(idx)
    assert out.tokens_per_expert.sum(dim=1).tolist() == [4 * 9 * TINY.top_k] * TINY.num_layers


def test_router_bias_shifts_load_to_the_biased_expert():
    model = tiny_model()
    idx = random_ids(4, 16)
    n = idx.numel()
    with torch.no_grad():
        before = model(idx).tokens_per_expert
        bias = torch.zeros(TINY.num_experts)
        bias[3] = 20.0
        for layer in model.blocks:
            layer.block_sparse_moe.router_bias = bias
        after = model(idx).tokens_per_expert
    assert (before[:, 3] < n).all()
    assert after[:, 3].tolist() == [n] * TINY.num_layers  # every token routes to expert 3
    assert after.sum(dim=1).tolist() == before.sum(dim=1).tolist()


def test_mtp_loss_present_iff_mtp_depth_positive():
    idx = random_ids(2, 8)
    without = tiny_model(TINY.replace(mtp_depth=0))
    assert len(without.mtp) == 0
    assert not any(k.startswith("mtp.") for k in without.state_dict())
    assert without(idx, idx).mtp_loss is None

    with_mtp = tiny_model()
    out = with_mtp(idx, idx)
    assert out.mtp_loss is not None and torch.isfinite(out.mtp_loss)
    assert any(k.startswith("mtp.0.") for k in with_mtp.state_dict())
    assert with_mtp(idx).loss is None and with_mtp(idx).mtp_loss is None  # no targets


def test_init_is_deterministic_with_a_seed():
    a, b, c = tiny_model(seed=7), tiny_model(seed=7), tiny_model(seed=8)
    for (name, pa), pb in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        assert torch.equal(pa, pb), name
    assert not torch.equal(a.lm_head.weight, c.lm_head.weight)


def test_aux_loss_is_one_when_balanced_and_higher_when_skewed():
    # Switch Transformer: E * sum(f_e * P_e) is 1 at perfect balance, E at full collapse.
    moe = MoE(TINY, layer=0)
    x = torch.randn(64, TINY.hidden_size)
    with torch.no_grad():
        torch.nn.init.zeros_(moe.gate.weight)  # uniform probabilities
        _, balanced = moe(x)
        moe.router_bias = torch.tensor([30.0, 30.0, 0.0, 0.0])
        _, skewed = moe(x)
    assert skewed.aux_loss.item() > 1.5
    assert skewed.aux_loss.item() > balanced.aux_loss.item()


# -- the tokenizer -----------------------------------------------------------------------

DOCS = [
    "Return a new list containing all items from the iterable in ascending order.",
    "The with statement is used to wrap the execution of a block with methods defined "
    "by a context manager.",
    "Café naïve 東京 — ünïcödé ✓ résumé",
] * 20


@pytest.fixture(scope="module")
def tokenizer() -> ChatTokenizer:
    return train_tokenizer(DOCS, vocab_size=400)


def test_special_tokens_have_the_ids_moeconfig_expects(tokenizer):
    assert [tokenizer.tokenizer.token_to_id(t) for t in SPECIAL_TOKENS] == list(range(7))
    cfg = MoEConfig()
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id) == (
        cfg.bos_token_id,
        cfg.eos_token_id,
    )
    assert tokenizer.pad_token_id == 0
    assert tokenizer.stop_token_ids == (2, SPECIAL_TOKENS.index("<|end|>"))
    assert tokenizer.vocab_size == 400


ROUND_TRIP_TEXTS = (
    "",
    " leading and  double  spaces ",
    "tabs\tand\nnewlines\r\n",
    "東京 ✓ 🙂 \x00 é",
    "<|user|>x<|end|></s>",
)


@pytest.mark.parametrize("text", ROUND_TRIP_TEXTS)
def test_decode_inverts_encode(tokenizer, text):
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_encode_adds_no_special_tokens(tokenizer):
    ids = tokenizer.encode("Return a new list")
    assert ids and all(i >= len(SPECIAL_TOKENS) for i in ids)
    assert tokenizer.encode("a</s>")[-1] == tokenizer.eos_token_id


def test_chat_template_renders_roles_and_generation_prompt(tokenizer):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert tokenizer.render_chat(messages) == (
        "<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\n"
    )
    assert tokenizer.render_chat(messages, add_generation_prompt=False).endswith("Hi<|end|>\n")
    ids = tokenizer.apply_chat_template(messages)
    assert ids[0] == SPECIAL_TOKENS.index("<|system|>")
    assert ids.count(tokenizer.end_token_id) == 2
    assert tokenizer.decode(ids) == tokenizer.render_chat(messages)


def test_tokenizer_saves_and_reloads(tokenizer, tmp_path):
    tokenizer.save(tmp_path)
    again = ChatTokenizer.from_dir(tmp_path)
    text = DOCS[0] + DOCS[2]
    assert again.encode(text) == tokenizer.encode(text)
    assert again.chat_template == tokenizer.chat_template


# -- the training text -------------------------------------------------------------------


def test_stdlib_files_skip_tests_and_third_party():
    files = stdlib_files()
    parts = {p for f in files for p in f.parts}
    assert not parts & {"test", "tests", "idle_test", "site-packages", "__pycache__"}
    names = {f.name for f in files}
    assert {"argparse.py", "json", "decoder.py"} - names == {"json"}  # files, not packages
    assert files == sorted(files, key=lambda f: f.as_posix())


@pytest.mark.slow  # the whole stdlib parsed when no process has cached it yet
def test_corpus_is_english_prose_and_deterministic():
    # Loaded (from the disk cache when another process parsed it first); its first 200
    # files parsed again give its first documents (help topics, then a document per file,
    # in the files' order), and its hash is its documents'. (Issue 48: the whole stdlib
    # parsed again took 24 s of a busy worker; each file is parsed by the same code.)
    corpus = load_corpus()
    head = parse_corpus(stdlib_files()[:200])
    assert len(head.documents) > 200
    assert corpus.documents[: len(head.documents)] == head.documents
    assert corpus_cache.documents_sha256(corpus.documents) == corpus.sha256
    assert corpus.num_chars > 1_000_000
    text = "\n".join(corpus.documents)
    assert "JSON (JavaScript Object Notation)" in text  # json/__init__.py's docstring
    assert 'The "if" statement is used for conditional execution' in text  # help("if")
    assert corpus.python_version.count(".") == 2
