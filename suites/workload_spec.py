"""The ``[workload]`` of a serving spec: what each request sends, and how the cache is kept clean.

Kinds: ``random`` (exact token lengths, optionally with shared prefixes), ``dataset`` (a
JSONL or ShareGPT file) and ``trace`` (a recorded request trace, replayed at its times).
``[workload.prefix]`` (random) shares a few long prefixes between requests;
``[workload.conversation]`` turns each closed-loop stream into multi-turn conversations.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from moeperf.suites.spec_base import NonNegative, Strict


class LengthSpec(Strict):
    # How each request's length (tokens) is drawn: "fixed" (always mean), "uniform" (mean
    # +- spread), "normal" (standard deviation spread), "lognormal" (median mean).
    dist: Literal["fixed", "uniform", "normal", "lognormal"] = "fixed"
    # The length in tokens (fixed), else the distribution's centre.
    mean: Annotated[int, Field(ge=1)] = 128
    # uniform: the half-width in tokens; normal: the standard deviation in tokens;
    # lognormal: the standard deviation of log(length). Unused by fixed.
    spread: NonNegative = 0.0
    # The shortest length (tokens): a shorter draw is raised to it.
    min: Annotated[int, Field(ge=1)] = 1
    # The longest length (tokens): a longer draw is cut to it.
    max: Annotated[int, Field(ge=1)] = 1_000_000


class PrefixSpec(Strict):
    """Shared prefixes (system prompts, few-shot examples, documents) that a prefix cache
    can serve: each prompt starts with one of ``count`` prefixes of ``tokens`` tokens,
    prefix k (from 1) drawn with probability proportional to 1 / k ** zipf_s (0: all
    alike), and goes on with its own random suffix up to its sampled input length."""

    # How many distinct shared prefixes.
    count: Annotated[int, Field(ge=1)] = 4
    # Each prefix's length in tokens (part of the prompt's sampled input length).
    tokens: Annotated[int, Field(ge=1)]
    # Popularity: prefix k is drawn with probability proportional to 1 / k ** zipf_s
    # (0: all equally often).
    zipf_s: NonNegative = 1.0
    # Also run each level with prompts of the same lengths and no shared prefix: the
    # TTFT without reuse, measured beside it (scenarios "... unique").
    unique_control: bool = True


class ConversationSpec(Strict):
    """Multi-turn conversations: each closed-loop stream holds one conversation at a time
    of ``turns`` requests; turn k sends the history so far (every earlier user message
    and the reply the target streamed) plus a new user message from the prompt pool, after
    ``think_time_s`` (the user reading; not part of any latency)."""

    # Requests per conversation; turn k sends the history so far and a new user message.
    turns: Annotated[int, Field(ge=2)] = 4
    # Wait after a reply before the next turn is sent (the user reading; in no latency).
    think_time_s: NonNegative = 0.0


class TraceSpec(Strict):
    """A request trace replayed open loop at its recorded times (``load.mode = 'trace'``;
    ``load.levels`` are speed-ups: 2 sends it twice as fast)."""

    # The trace file: as given (absolute, or relative to the working directory), else
    # under the shipped specs (suites/specs/).
    path: str
    # "mooncake": {timestamp (ms), input_length, output_length, hash_ids}; "jsonl":
    # {timestamp (s), input_tokens, output_tokens}; "auto": chosen by the first record's keys.
    format: Literal["auto", "mooncake", "jsonl"] = "auto"
    # Tokens per hash id: the trace's block size (Mooncake's release: 512).
    block_tokens: Annotated[int, Field(ge=1)] = 512
    # Replay only the trace's earliest this many requests; unset: all of them.
    max_requests: Annotated[int, Field(ge=1)] | None = None


class WorkloadSpec(Strict):
    # "random": prompts of random tokens of exact lengths in the target's tokenizer;
    # "dataset": prompts from dataset_path; "trace": a recorded trace ([workload.trace]).
    kind: Literal["random", "dataset", "trace"] = "random"
    # Prompt lengths in tokens (random).
    input_tokens: LengthSpec = LengthSpec(mean=128)
    # Output tokens asked of each request (its max tokens), random and dataset (a
    # dataset's own counts are not used); a trace's requests ask for their recorded ones.
    output_tokens: LengthSpec = LengthSpec(mean=64)
    # random: every prompt starts with the same prefix of this many tokens, counted in its
    # input length (0: none).
    shared_prefix_tokens: Annotated[int, Field(ge=0)] = 0
    # Set: several shared prefixes with Zipf popularity (random only).
    prefix: PrefixSpec | None = None
    # Set: multi-turn conversations (chat, closed loop).
    conversation: ConversationSpec | None = None
    # The trace to replay (kind = "trace").
    trace: TraceSpec | None = None
    # kind = "dataset": a JSONL file of {"prompt", "output_tokens"} or ShareGPT records, or
    # a JSON array of them.
    dataset_path: str = ""
    # Distinct prompts built up front for each level and cycled through; with cache =
    # "fresh", more where a level is known to send more (load.max_requests, an open-loop
    # rate times its duration), so that no level sends one twice.
    num_prompts: Annotated[int, Field(ge=1)] = 256
    # "" none, "server" (the target's /tokenize), or a local Hugging Face tokenizer dir.
    tokenizer: str = "server"
    # Seed of the prompts (their lengths and tokens; a dataset's order); each pool of
    # prompts derives its own seed from it.
    seed: int = 0
    # "fresh": every level (and repeat, and control) draws its own prompts, from its own
    # seed, and the target's prefix cache is reset before it where the target offers a
    # reset; "reuse": every level draws the same prompts and nothing is reset (the
    # warm-cache numbers, on purpose).
    cache: Literal["fresh", "reuse"] = "fresh"

    @model_validator(mode="after")
    def _kind_needs_its_fields(self) -> WorkloadSpec:
        if self.kind == "dataset" and not self.dataset_path:
            raise ValueError("workload.dataset_path is required when kind = 'dataset'")
        if self.kind == "trace" and self.trace is None:
            raise ValueError("workload.kind = 'trace' needs [workload.trace] with its path")
        if self.kind != "trace" and self.trace is not None:
            raise ValueError("[workload.trace] is read only when workload.kind = 'trace'")
        if self.prefix is not None:
            if self.kind != "random":
                raise ValueError("[workload.prefix] needs workload.kind = 'random'")
            if self.shared_prefix_tokens:
                raise ValueError(
                    "workload.shared_prefix_tokens is one shared prefix; [workload.prefix] "
                    "sets several: keep one of them"
                )
        if self.conversation is not None and self.kind == "trace":
            raise ValueError(
                "[workload.conversation] builds its own requests: it cannot replay a trace"
            )
        return self
