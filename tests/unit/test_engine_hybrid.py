"""The engine serving the hybrid (Qwen3-Next) model: greedy output equal to dense
decoding and to transformers, with and without chunked prefill, MTP and preemption; the
linear state after MTP verification equal to the state of the accepted tokens alone."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file
from torch import Tensor

from moeperf.targets.model.attention import causal_attention
from moeperf.targets.model.gated_deltanet import GatedDeltaNet, LinearState
from moeperf.targets.model.hybrid import HybridMoETransformer
from moeperf.targets.model.hybrid_config import HybridConfig
from moeperf.targets.serving.engine import mtp_drafter
from moeperf.targets.serving.engine.api import EngineConfig, SamplingParams
from moeperf.targets.serving.engine.engine import PREFIX_CACHING_OFF_FOR_LINEAR, Engine
from moeperf.targets.serving.engine.sequence import Sequence

OUTPUT_TOKENS = 8
PARAMS = SamplingParams(max_tokens=OUTPUT_TOKENS, ignore_eos=True)


@pytest.fixture(scope="module")
def model() -> HybridMoETransformer:
    torch.manual_seed(0)
    m = HybridMoETransformer(HybridConfig()).eval()
    with torch.no_grad():  # norms start at 0 (1 + w) or 1: move them so that they matter
        for name, param in m.named_parameters():
            if "norm" in name:
                param.normal_(0.0, 0.1)
    return m


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    gen = torch.Generator().manual_seed(5)
    return [torch.randint(3, 4096, (n,), generator=gen).tolist() for n in (5, 30, 90, 150)]


def dense_greedy(model: HybridMoETransformer, prompt: list[int], steps: int) -> list[int]:
    """Greedy decoding by recomputing the whole sequence for every token: no cache, no state."""
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(steps):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt) :]


@pytest.fixture(scope="module")
def reference(model, prompts) -> list[list[int]]:
    return [dense_greedy(model, p, OUTPUT_TOKENS) for p in prompts]


@pytest.mark.parametrize(
    "knobs",
    [
        {},
        {"chunked_prefill_size": 16},
        {"chunked_prefill_size": 0, "max_num_batched_tokens": 1024},
        {"mtp_tokens": 2, "chunked_prefill_size": 32},
    ],
    ids=["chunks of 256", "chunks of 16", "whole prompts", "mtp 2, chunks of 32"],
)
def test_greedy_output_equals_dense_decoding(model, prompts, reference, knobs):
    engine = Engine(model, EngineConfig(**knobs))
    assert engine.generate(prompts, PARAMS) == reference


def test_preempted_requests_recompute_their_state(model, prompts, reference):
    # 4 running requests need 1 + 3 + 7 + 10 blocks at their last token: 16 do not hold them.
    engine = Engine(model, EngineConfig(num_kv_blocks=16, chunked_prefill_size=64))
    assert engine.generate(prompts, PARAMS) == reference
    assert engine.stats().counters.preemptions > 0
    assert engine.linear is not None and engine.linear.slots_in_use == 0


def _reference_state(model: HybridMoETransformer, tokens: list[int]) -> list[LinearState]:
    """Each linear layer's state after ``tokens``, from one dense pass over them."""
    states: list[LinearState] = []

    def record(layer: GatedDeltaNet, mixed: Tensor, g: Tensor, beta: Tensor) -> Tensor:
        out, state = layer.core(mixed[None], g[None], beta[None], layer.zero_state(1, mixed.dtype))
        states.append(state)
        return out[0]

    n = len(tokens)
    with torch.no_grad():
        model.forward_flat(torch.tensor(tokens), torch.arange(n), causal_attention(1, n), record)
    return states


def test_rejected_drafts_leave_no_trace_in_the_linear_state(model, prompts, reference, monkeypatch):
    """An oracle proposes the true next tokens except at every third position, so drafts
    are accepted in part; after every step each running request's linear state must be
    that of its committed tokens."""
    prompts, reference = prompts[:3], reference[:3]  # dense state checks at every step: time
    full = {tuple(p): p + r for p, r in zip(prompts, reference, strict=True)}

    def propose(seq: Sequence, logits: Tensor) -> None:
        position = seq.num_tokens + len(seq.draft_ids)
        true = full[tuple(seq.token_ids[: seq.prompt_len])][position]
        seq.draft_ids.append(true if position % 3 else (true + 1) % 4096)

    monkeypatch.setattr(mtp_drafter.MTPDrafter, "_propose", staticmethod(propose))
    engine = Engine(model, EngineConfig(mtp_tokens=3))
    outputs: dict[str, list[int]] = {}
    for i, prompt in enumerate(prompts):
        outputs[str(i)] = []
        engine.add_request(
            str(i), prompt, PARAMS, lambda o: outputs[o.request_id].extend(o.new_token_ids)
        )
    checked = 0
    while engine.step():
        assert engine.linear is not None
        for seq in engine.scheduler.running:
            if seq.finish_reason or not seq.is_decoding:
                continue
            slot = engine.linear.slot(seq)
            expected = _reference_state(model, seq.token_ids[: seq.num_computed])
            for layer, state in enumerate(expected):
                assert torch.allclose(
                    engine.linear.recurrent[layer][slot], state.recurrent[0], atol=1e-5
                )
                assert torch.allclose(engine.linear.conv[layer][slot], state.conv[0], atol=1e-6)
            checked += 1
    assert [outputs[str(i)] for i in range(len(prompts))] == reference
    c = engine.counters
    assert 0 < c.spec_decode_accepted_tokens < c.spec_decode_draft_tokens  # accepted in part
    assert checked > 0


def test_greedy_output_equals_transformers_generate(model, prompts, tmp_path):
    transformers = pytest.importorskip("transformers")
    (tmp_path / "config.json").write_text(json.dumps(model.config.to_hf()))
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    engine = Engine(model, EngineConfig(chunked_prefill_size=32))
    ours = engine.generate(prompts[1:3], PARAMS)
    for prompt, tokens in zip(prompts[1:3], ours, strict=True):
        out = hf.generate(
            torch.tensor([prompt]),
            max_new_tokens=OUTPUT_TOKENS,
            do_sample=False,
            min_new_tokens=OUTPUT_TOKENS,
        )
        assert out[0, len(prompt) :].tolist() == tokens


def test_state_and_kv_bytes_are_reported_apart_and_prefix_caching_is_off(model):
    engine = Engine(model, EngineConfig(num_kv_blocks=64, block_size=16))
    assert engine.linear is not None
    cfg = model.config
    per_layer = cfg.conv_dim * (cfg.linear_conv_kernel_dim - 1) * 4 + (
        cfg.linear_num_value_heads * cfg.linear_key_head_dim * cfg.linear_value_head_dim * 4
    )
    assert engine.linear.bytes_per_sequence == cfg.num_linear_layers * per_layer
    done: list[bool] = []
    engine.add_request(
        "a", list(range(5, 45)), SamplingParams(max_tokens=3), lambda o: done.append(o.finished)
    )
    engine.step()  # the prompt (40 tokens: 3 blocks)
    stats = engine.stats()
    assert stats.linear_state_bytes_used == engine.linear.bytes_per_sequence
    # KV: 1 full-attention layer + the MTP slot, 2 x 2 kv heads x 64 x 4 bytes per token.
    assert stats.kv_bytes_used == 3 * 16 * 2 * (2 * 2 * 64 * 4)
    assert stats.prefix_caching_off_reason == PREFIX_CACHING_OFF_FOR_LINEAR
    assert not engine.pool.enable_prefix_caching


def test_metrics_expose_state_kv_bytes_and_why_prefix_caching_is_off(model):
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from moeperf.targets.serving.metrics import ReferenceMetrics

    engine = Engine(model, EngineConfig(num_kv_blocks=64))
    engine.add_request("a", list(range(5, 45)), SamplingParams(max_tokens=3), lambda o: None)
    engine.step()
    text = generate_latest(ReferenceMetrics(engine.stats).registry).decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert engine.linear is not None
    assert samples[("reference_linear_state_used_bytes", ())] == engine.linear.bytes_per_sequence
    assert samples[("reference_kv_cache_used_bytes", ())] == 3 * engine.cache.bytes_per_block
    reason = (("reason", PREFIX_CACHING_OFF_FOR_LINEAR),)
    assert samples[("reference_prefix_caching_enabled", reason)] == 0.0
