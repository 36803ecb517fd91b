"""One request's state inside the engine."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from moeperf.targets.serving.engine.api import (
    FinishReason,
    RequestOutput,
    SamplingParams,
    TokenLogprob,
)
from moeperf.targets.serving.engine.block_pool import Block


@dataclass(eq=False)
class Sequence:
    request_id: str
    prompt_len: int
    token_ids: list[int]  # prompt, then every committed output token
    params: SamplingParams
    on_output: Callable[[RequestOutput], None]
    generator: torch.Generator
    blocks: list[Block] = field(default_factory=list)
    # Positions whose keys and values are in the cache. Once the prompt is in, exactly one
    # token (the last one sampled) is not: it is fed by the next step.
    num_computed: int = 0
    num_mtp_computed: int = 0  # MTP entries (positions) written with committed inputs
    block_hashes: list[int] = field(default_factory=list)  # leading full blocks, registered
    draft_ids: list[int] = field(default_factory=list)  # MTP's proposal for the next step
    # A sampled request's: the distribution each draft was drawn from ([V] each).
    draft_probs: list[torch.Tensor] = field(default_factory=list)
    cached_prompt_tokens: int = 0
    # Filled at prefill when params.prompt_logprobs asks (prompt_logprobs.py): one entry per
    # prompt token so far, None for the first; handed out once (prompt_logprobs_sent).
    prompt_logprobs: list[TokenLogprob | None] = field(default_factory=list)
    prompt_logprobs_sent: bool = False
    finish_reason: FinishReason | None = None

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_output(self) -> int:
        return len(self.token_ids) - self.prompt_len

    @property
    def is_decoding(self) -> bool:
        """All but the last sampled token computed: the next step is a decode step."""
        return self.num_output > 0 and self.num_computed == self.num_tokens - 1

    def block_ids(self) -> list[int]:
        return [b.block_id for b in self.blocks]

    def reset_for_recompute(self) -> None:
        """Preempted: its cache is gone; prompt and output so far are computed again."""
        self.blocks = []
        self.num_computed = 0
        self.num_mtp_computed = 0
        self.block_hashes = []
        self.draft_ids = []
        self.draft_probs = []
