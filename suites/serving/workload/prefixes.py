"""Shared-prefix prompts: a few long prefixes with Zipf popularity, each prompt's own suffix.

Production prompts share long starts (a system prompt, few-shot examples, a document
several questions are asked about), and a prefix cache serves those from memory: TTFT
then depends on how many prompts share which prefix. Prefix k (from 1) is drawn with
probability proportional to 1 / k ** zipf_s, as popularity is in the traces (a few
prefixes take most requests); zipf_s = 0 makes them equally likely.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from moeperf.suites.serving.workload.sources import (
    LengthDist,
    Prompt,
    WorkloadError,
    _prefixed_texts,
)
from moeperf.suites.serving.workload.tokenizer import TargetTokenizer


@dataclass(frozen=True, slots=True)
class PrefixPlan:
    count: int  # distinct prefixes
    tokens: int  # each prefix's length
    zipf_s: float  # popularity exponent (0: uniform)

    def weights(self) -> list[float]:
        """Each prefix's probability, most popular first."""
        raw = [1.0 / k**self.zipf_s for k in range(1, self.count + 1)]
        total = sum(raw)
        return [w / total for w in raw]


async def prefixed_prompts(
    tokenizer: TargetTokenizer,
    count: int,
    input_len: LengthDist,
    output_len: LengthDist,
    plan: PrefixPlan,
    seed: int | str = 0,
) -> list[Prompt]:
    """``count`` prompts of exact length, each starting with one of the plan's prefixes.

    The prefix counts toward the sampled input length; the suffix has at least 1 token,
    so a prompt is longer than sampled when the sample is below the prefix length.
    Deterministic given the seed and the tokenizer.
    """
    if count < 1:
        raise WorkloadError(f"prompt count must be >= 1, got {count}")
    rng = random.Random(f"moeperf.prefixes.draw:{seed}")
    chosen = rng.choices(range(plan.count), weights=plan.weights(), k=count)
    input_tokens = [input_len.sample(rng) for _ in range(count)]
    output_tokens = [output_len.sample(rng) for _ in range(count)]
    suffix_tokens = [max(1, n - plan.tokens) for n in input_tokens]
    prefix_rngs = [random.Random(f"moeperf.prefixes.prefix:{seed}:{k}") for k in range(plan.count)]
    prefixes = await tokenizer.abuild_many([plan.tokens] * plan.count, prefix_rngs)
    texts = [""] * count
    for k, prefix in enumerate(prefixes):
        members = [i for i in range(count) if chosen[i] == k]
        if not members:
            continue
        rngs = [random.Random(f"moeperf.prefixes.suffix:{seed}:{i}") for i in members]
        joined = await _prefixed_texts(
            tokenizer, prefix, plan.tokens, [suffix_tokens[i] for i in members], rngs
        )
        for i, text in zip(members, joined, strict=True):
            texts[i] = text
    return [
        Prompt(text, plan.tokens + n_suffix, n_out)
        for text, n_suffix, n_out in zip(texts, suffix_tokens, output_tokens, strict=True)
    ]
