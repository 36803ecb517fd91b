"""Prompt logprobs from the engine: each prompt token's log-softmax under a plain dense
forward of the same model, whatever the chunking, preemption or prefix cache."""

import pytest
import torch

from moeperf.targets.model import MoEConfig, MoETransformer
from moeperf.targets.serving.engine.api import EngineConfig, RequestOutput, SamplingParams
from moeperf.targets.serving.engine.engine import Engine

TOP_N = 3


@pytest.fixture(scope="module")
def model() -> MoETransformer:
    torch.manual_seed(0)
    cfg = MoEConfig(
        vocab_size=256, hidden_size=64, expert_hidden_size=32, num_layers=2, num_heads=4,
        num_kv_heads=2, num_experts=4, top_k=2, mtp_depth=1,
    )  # fmt: skip
    m = MoETransformer(cfg).eval()
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() == 2:
                p.mul_(4.0)
    return m


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(2)
    lengths = [1, 2, 17, 40, 33, 9]
    return [torch.randint(3, 256, (n,), generator=g).tolist() for n in lengths]


def dense_log_softmax(model: MoETransformer, prompt: list[int]) -> torch.Tensor:
    """[len(prompt), V]: row p is the distribution of token p + 1 given tokens 0..p."""
    with torch.no_grad():
        return torch.log_softmax(model(torch.tensor([prompt])).logits[0].float(), dim=-1)


def run(engine: Engine, prompts: list[list[int]], params: SamplingParams) -> list[RequestOutput]:
    seen: list[RequestOutput] = []
    for i, prompt in enumerate(prompts):
        engine.add_request(str(i), prompt, params, seen.append)
    while engine.has_work():
        engine.step()
    return seen


def check_against_dense(model, prompts, outputs: list[RequestOutput]) -> None:
    by_request = {}
    for out in outputs:
        if out.prompt_logprobs is not None:
            assert out.request_id not in by_request, "prompt logprobs come once per request"
            by_request[out.request_id] = out
    assert sorted(by_request) == [str(i) for i in range(len(prompts))]
    for i, prompt in enumerate(prompts):
        out = by_request[str(i)]
        assert out.new_token_ids, "they come with the request's first tokens"
        entries = out.prompt_logprobs
        assert entries is not None and len(entries) == len(prompt)
        assert entries[0] is None  # the first token has no context
        expected = dense_log_softmax(model, prompt)
        for j in range(1, len(prompt)):
            entry = entries[j]
            assert entry is not None and entry.token_id == prompt[j]
            row = expected[j - 1]
            assert entry.logprob == pytest.approx(float(row[prompt[j]]), abs=1e-4)
            assert entry.rank == int((row > row[prompt[j]]).sum()) + 1
            top = row.topk(TOP_N)
            assert [t for t, _ in entry.top] == top.indices.tolist()
            assert [v for _, v in entry.top] == pytest.approx(top.values.tolist(), abs=1e-4)


CONFIGS = {
    "whole": EngineConfig(chunked_prefill_size=0),
    "chunked": EngineConfig(chunked_prefill_size=7, max_num_batched_tokens=24, block_size=4,
                            max_running_requests=4),
    "preempting": EngineConfig(num_kv_blocks=20, block_size=4, max_running_requests=8,
                               max_num_batched_tokens=64, chunked_prefill_size=16),
}  # fmt: skip


@pytest.mark.parametrize("name", list(CONFIGS))
def test_prompt_logprobs_equal_a_dense_forward(model, prompts, name):
    engine = Engine(model, CONFIGS[name])
    params = SamplingParams(max_tokens=6, ignore_eos=True, prompt_logprobs=TOP_N)
    check_against_dense(model, prompts, run(engine, prompts, params))
    if name == "preempting":
        assert engine.stats().counters.preemptions > 0


def test_a_repeated_prompt_is_computed_whole_with_prefix_caching_on(model, prompts):
    engine = Engine(model, EngineConfig(block_size=4))
    plain = SamplingParams(max_tokens=2, ignore_eos=True)
    run(engine, prompts, plain)  # fills the prefix cache with every prompt's blocks
    again = run(engine, prompts, plain)
    assert sum(o.cached_prompt_tokens for o in again if o.finished) > 0  # a hit without them
    hits_before = engine.stats().counters.prefix_cache_hits
    params = SamplingParams(max_tokens=2, ignore_eos=True, prompt_logprobs=TOP_N)
    outputs = run(engine, prompts, params)
    check_against_dense(model, prompts, outputs)
    assert all(o.cached_prompt_tokens == 0 for o in outputs)
    assert engine.stats().counters.prefix_cache_hits == hits_before


def test_no_prompt_logprobs_unless_asked(model, prompts):
    outputs = run(Engine(model), prompts[:2], SamplingParams(max_tokens=2, logprobs=1))
    assert all(o.prompt_logprobs is None for o in outputs)
    zero = run(Engine(model), prompts[2:3], SamplingParams(max_tokens=1, prompt_logprobs=0))
    (first,) = (o.prompt_logprobs for o in zero if o.prompt_logprobs is not None)
    assert all(e is None or (e.top == () and e.rank is not None) for e in first)
