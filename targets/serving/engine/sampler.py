"""Choosing tokens from logits: greedy or temperature/top-p with a per-request generator,
and the log-probabilities a client asked for."""

from __future__ import annotations

import torch
from torch import Tensor

from targets.serving.engine.api import SamplingParams, TokenLogprob


def sample(logits: Tensor, params: SamplingParams, generator: torch.Generator) -> list[int]:
    """One token per row of ``logits [R, V]``.

    Rows are drawn in order from the request's own generator, so a seeded request gives
    the same tokens whatever else is in the batch.
    """
    if params.temperature == 0.0:
        return logits.argmax(dim=-1).tolist()
    probs = torch.softmax(logits.float() / params.temperature, dim=-1)
    if params.top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        # Keep the smallest set whose mass reaches top_p (the most likely token always).
        outside = sorted_probs.cumsum(dim=-1) - sorted_probs >= params.top_p
        sorted_probs[outside] = 0.0
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1).tolist()


def logprobs(logits: Tensor, chosen: list[int], top_n: int) -> list[TokenLogprob]:
    """The model's own log-probabilities (before temperature, as vLLM reports them)."""
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    out = []
    best = log_probs.topk(top_n, dim=-1) if top_n else None
    for row, token_id in enumerate(chosen):
        top: tuple[tuple[int, float], ...] = ()
        if best is not None:
            top = tuple(zip(best.indices[row].tolist(), best.values[row].tolist(), strict=True))
        out.append(TokenLogprob(token_id, float(log_probs[row, token_id]), top))
    return out
