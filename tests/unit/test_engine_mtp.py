"""MTP speculative decoding with the shipped, trained model: greedy output unchanged, and
drafts that the main model really accepts."""

import pytest

from targets.model.checkpoint import default_model_dir, load_model_dir
from targets.serving.engine.api import EngineConfig, SamplingParams
from targets.serving.engine.engine import Engine

pytestmark = pytest.mark.slow

OPENINGS = [
    "The module provides", "Return the number of", "class Foo:", "This function",
    "If the argument is", "The default value", "Raise an exception when", "A list of",
    "Create a new", "The following", "Note that the", "When the file",
    "Return a string", "The object is", "Set the", "Each element",
]  # fmt: skip


@pytest.fixture(scope="module")
def model_and_prompts():
    model, tokenizer = load_model_dir(default_model_dir())
    return model, [tokenizer.encode(text) for text in OPENINGS]


def test_greedy_output_is_identical_with_and_without_mtp(model_and_prompts):
    model, prompts = model_and_prompts
    params = SamplingParams(max_tokens=40, ignore_eos=True)
    plain = Engine(model, EngineConfig(mtp_tokens=0)).generate(prompts, params)
    for k in (1, 2, 3):
        engine = Engine(model, EngineConfig(mtp_tokens=k))
        assert engine.generate(prompts, params) == plain, f"mtp_tokens={k}"
        c = engine.stats().counters
        rate = [accepted / c.spec_decode_drafts for accepted in c.spec_decode_accepted_per_position]
        # The trained module's first draft agrees with the main model about 70% of the
        # time here; a broken catch-up or rollback drops it to near zero.
        assert rate[0] > 0.4, rate
        assert rate == sorted(rate, reverse=True)  # a later draft needs the earlier ones
        assert c.steps < c.generation_tokens
