"""The serving engine against plain dense decoding of the same model."""

import pytest
import torch

from moeperf.targets.model import MoEConfig, MoETransformer
from moeperf.targets.serving.engine.api import (
    EngineConfig,
    InvalidRequestError,
    QueueFullError,
    RequestOutput,
    SamplingParams,
    TokenLogprob,
)
from moeperf.targets.serving.engine.engine import Engine

GREEDY = SamplingParams(max_tokens=12, ignore_eos=True)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    cfg = MoEConfig(
        vocab_size=256, hidden_size=64, expert_hidden_size=32, num_layers=2, num_heads=4,
        num_kv_heads=2, num_experts=4, top_k=2, mtp_depth=1,
    )  # fmt: skip
    # Larger weights than the init gives: sharper logits, so greedy ties are not a coin flip.
    m = MoETransformer(cfg).eval()
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() == 2:
                p.mul_(4.0)
    return m


@pytest.fixture(scope="module")
def prompts():
    g = torch.Generator().manual_seed(1)
    lengths = torch.randint(1, 60, (10,), generator=g).tolist()
    return [torch.randint(3, 256, (n,), generator=g).tolist() for n in lengths]


def dense_greedy(model, prompt, max_tokens):
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(max_tokens):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt) :]


@pytest.fixture(scope="module")
def reference(model, prompts):
    return [dense_greedy(model, p, GREEDY.max_tokens) for p in prompts]


CONFIGS = {
    "default": EngineConfig(),
    "chunked": EngineConfig(chunked_prefill_size=7, max_num_batched_tokens=24, block_size=4,
                            max_running_requests=4),
    "preempting": EngineConfig(num_kv_blocks=24, block_size=4, max_running_requests=8,
                               max_num_batched_tokens=64, chunked_prefill_size=16),
    "mtp": EngineConfig(mtp_tokens=3, block_size=4, max_num_batched_tokens=128),
    "mtp-preempting": EngineConfig(mtp_tokens=2, num_kv_blocks=30, block_size=4,
                                   max_running_requests=8, max_num_batched_tokens=64,
                                   chunked_prefill_size=16),
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CONFIGS))
def test_greedy_output_equals_dense_decoding(model, prompts, reference, name):
    engine = Engine(model, CONFIGS[name])
    assert engine.generate(prompts, GREEDY) == reference
    # Run twice: the second pass hits the prefix cache, and still changes nothing.
    assert engine.generate(prompts, GREEDY) == reference
    counters = engine.stats().counters
    assert counters.prefix_cache_hits > 0
    if name.endswith("preempting"):
        assert counters.preemptions > 0
    if name.startswith("mtp"):
        assert counters.spec_decode_draft_tokens > 0
    assert engine.stats().kv_blocks_used == 0  # every block returned


def logprobs_of(output: RequestOutput) -> tuple[TokenLogprob, ...]:
    assert output.new_logprobs is not None, "the request asked for logprobs"
    return output.new_logprobs


def test_prefix_cache_reuses_blocks_and_reports_cached_tokens(model):
    engine = Engine(model, EngineConfig(block_size=8))
    shared = list(range(10, 42))  # four full blocks
    outputs = []
    params = SamplingParams(max_tokens=4, ignore_eos=True, logprobs=0)

    def collect(out):
        outputs.append(out)

    engine.add_request("a", [*shared, 5, 6], params, collect)
    while engine.has_work():
        engine.step()
    engine.add_request("b", [*shared, 7], params, collect)
    while engine.has_work():
        engine.step()
    cached = {o.request_id: o.cached_prompt_tokens for o in outputs if o.finished}
    assert cached == {"a": 0, "b": 32}
    counters = engine.stats().counters
    assert counters.prefix_cache_hits == 32
    assert counters.prefix_cache_queries == 34 + 33
    assert counters.prefill_tokens == 34 + 1  # b computed only its last token
    fresh = Engine(model, EngineConfig(block_size=8, enable_prefix_caching=False))
    fresh_outputs: list[RequestOutput] = []
    fresh.add_request("b", [*shared, 7], params, fresh_outputs.append)
    while fresh.has_work():
        fresh.step()
    hit = [lp for o in outputs if o.request_id == "b" for lp in logprobs_of(o)]
    miss = [lp for o in fresh_outputs for lp in logprobs_of(o)]
    assert [lp.token_id for lp in hit] == [lp.token_id for lp in miss]
    for a, b in zip(hit, miss, strict=True):
        assert a.logprob == pytest.approx(b.logprob, abs=1e-4)


def test_chunked_prefill_gives_the_same_logprobs_as_whole_prefill(model, prompts):
    params = SamplingParams(max_tokens=3, ignore_eos=True, logprobs=2)

    def logprobs(config):
        seen: list[RequestOutput] = []
        engine = Engine(model, config)
        for i, prompt in enumerate(prompts):
            engine.add_request(str(i), prompt, params, seen.append)
        while engine.has_work():
            engine.step()
        return sorted(
            (o.request_id, lp.token_id, lp.logprob) for o in seen for lp in logprobs_of(o)
        )

    whole = logprobs(EngineConfig(chunked_prefill_size=0, enable_prefix_caching=False))
    chunked = logprobs(EngineConfig(chunked_prefill_size=5, max_num_batched_tokens=32,
                                    enable_prefix_caching=False))  # fmt: skip
    assert [(r, t) for r, t, _ in whole] == [(r, t) for r, t, _ in chunked]
    for (_, _, a), (_, _, b) in zip(whole, chunked, strict=True):
        assert a == pytest.approx(b, abs=1e-4)


def test_verification_accepts_correct_drafts_and_rolls_back_wrong_ones(
    model, prompts, reference, monkeypatch
):
    """Drafts replaced by an oracle (the known greedy continuation, with every third draft
    wrong) exercise acceptance, the bonus token and KV rollback with known answers."""
    engine = Engine(model, EngineConfig(mtp_tokens=3, enable_prefix_caching=False))
    truth: dict[str, list[int]] = {}
    drafter = engine.drafter
    assert drafter is not None
    real_update = drafter.update

    def oracle_update(seqs, wants):
        real_update(seqs, wants)  # the real MTP entries are still written
        for seq in seqs:
            drafts = []
            for i in range(len(seq.draft_ids)):
                position = seq.num_output + i
                right = truth[seq.request_id][position]
                drafts.append(right if (position + 1) % 3 else (right + 1) % 256)
            seq.draft_ids = drafts

    monkeypatch.setattr(drafter, "update", oracle_update)
    results: dict[str, list[int]] = {}
    for i, (prompt, expected) in enumerate(zip(prompts, reference, strict=True)):
        truth[str(i)] = expected
        engine.add_request(str(i), prompt, GREEDY, lambda o: results.setdefault(
            o.request_id, []).extend(o.new_token_ids))  # fmt: skip
    while engine.has_work():
        engine.step()
    assert [results[str(i)] for i in range(len(prompts))] == reference
    c = engine.stats().counters
    assert 0 < c.spec_decode_accepted_tokens < c.spec_decode_draft_tokens
    per_position = c.spec_decode_accepted_per_position
    assert sum(per_position) == c.spec_decode_accepted_tokens
    assert per_position[0] >= per_position[1] >= per_position[2]
    # Every step commits accepted drafts plus one token: fewer steps than tokens.
    assert c.generation_tokens == sum(map(len, reference))
    assert c.steps < c.generation_tokens


@pytest.mark.parametrize("mtp_tokens", [0, 2])
def test_seeded_sampling_is_reproducible(model, prompts, mtp_tokens):
    config = EngineConfig(mtp_tokens=mtp_tokens)
    params = SamplingParams(max_tokens=10, temperature=0.9, top_p=0.95, seed=7, ignore_eos=True)
    first = Engine(model, config).generate(prompts[:4], params)
    assert Engine(model, config).generate(prompts[:4], params) == first
    other = SamplingParams(max_tokens=10, temperature=0.9, top_p=0.95, seed=8, ignore_eos=True)
    assert Engine(model, config).generate(prompts[:4], other) != first


def test_stop_tokens_and_max_tokens_end_requests(model, prompts, reference):
    engine = Engine(model)
    stop_at = reference[0][3]
    outputs: list[RequestOutput] = []
    engine.add_request("s", prompts[0], SamplingParams(max_tokens=12, stop_token_ids=(stop_at,)),
                       outputs.append)  # fmt: skip
    engine.add_request("l", prompts[1], SamplingParams(max_tokens=5, ignore_eos=True),
                       outputs.append)  # fmt: skip
    while engine.has_work():
        engine.step()
    final = {o.request_id: o for o in outputs if o.finished}
    tokens = {r: [t for o in outputs if o.request_id == r for t in o.new_token_ids] for r in "sl"}
    first_stop = reference[0].index(stop_at)
    assert tokens["s"] == reference[0][: first_stop + 1] and final["s"].finish_reason == "stop"
    assert tokens["l"] == reference[1][:5] and final["l"].finish_reason == "length"
    assert engine.stats().counters.finished_requests == {"stop": 1, "length": 1}


def test_abort_ends_a_running_request(model, prompts):
    engine = Engine(model)
    outputs: list[RequestOutput] = []
    engine.add_request("x", prompts[0], SamplingParams(max_tokens=100, ignore_eos=True),
                       outputs.append)  # fmt: skip
    engine.step()
    engine.step()
    engine.abort_request("x")
    engine.step()
    assert outputs[-1].finish_reason == "abort"
    assert not engine.has_work() and engine.stats().kv_blocks_used == 0


def test_full_queue_and_bad_requests_are_refused(model):
    engine = Engine(model, EngineConfig(max_waiting_requests=1, max_context_len=64))
    engine.add_request("a", [5], GREEDY, lambda o: None)
    with pytest.raises(QueueFullError, match="full"):
        engine.add_request("b", [5], GREEDY, lambda o: None)
    with pytest.raises(InvalidRequestError, match="already in use"):
        engine.add_request("a", [5], GREEDY, lambda o: None)
    cases = [
        ([], GREEDY, "empty"),
        ([999], GREEDY, r"\[0, 256\)"),
        ([5] * 60, SamplingParams(max_tokens=10), "context limit of 64"),
        ([5], SamplingParams(max_tokens=0), "max_tokens must be >= 1"),
        ([5], SamplingParams(temperature=-1.0), "temperature"),
    ]
    for prompt, params, message in cases:
        with pytest.raises(InvalidRequestError, match=message):
            engine.add_request("c", prompt, params, lambda o: None)


def test_counters_account_for_every_token(model, prompts):
    engine = Engine(model, EngineConfig(enable_prefix_caching=False))
    outputs = engine.generate(prompts, GREEDY)
    c = engine.stats().counters
    prompt_total = sum(map(len, prompts))
    assert c.prompt_tokens == c.prefill_tokens == prompt_total
    assert c.generation_tokens == sum(map(len, outputs))
    # The last token of each request is committed but never fed back.
    assert c.decode_tokens == c.generation_tokens - len(prompts)
    fed = c.prefill_tokens + c.decode_tokens
    cfg = model.config
    assert [sum(layer) for layer in c.expert_tokens] == [fed * cfg.top_k] * cfg.num_layers
