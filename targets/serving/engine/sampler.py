"""Choosing tokens from logits: greedy or temperature/top-p with a per-request generator,
verifying MTP drafts, and the log-probabilities a client asked for.

Drafts are verified so that the output is what the main model alone would give:

- greedy (temperature 0): a draft is accepted while it equals the main model's argmax;
- sampled: speculative (rejection) sampling, as vLLM and SGLang verify sampled drafts
  (Leviathan et al. 2023, Chen et al. 2023). Draft i, drawn from the drafter's
  distribution q_i, is accepted with probability min(1, p_i(x) / q_i(x)), p_i being the
  main model's distribution there after temperature and top-p; at the first rejection a
  token is drawn from the residual max(0, p_i - q_i), normalized, and verification stops;
  if every draft is accepted, one more token is drawn from p_k. Each committed token is
  then distributed exactly as p: the drafts change how many steps a request takes, never
  what it says. Exact-match verification of a sampled draft (accept only if an
  independent draw from p equals it) is also exact, but accepts with probability
  sum p(x) q(x) instead of sum min(p(x), q(x)): far fewer drafts at temperature 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from moeperf.targets.serving.engine.api import SamplingParams, TokenLogprob


def sampling_probs(logits: Tensor, params: SamplingParams) -> Tensor:
    """The distribution a sampled request draws from: softmax(logits / T), cut to the
    top-p nucleus and renormalized (``[R, V]`` float32). Not for greedy requests."""
    probs = torch.softmax(logits.float() / params.temperature, dim=-1)
    if params.top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        # Keep the smallest set whose mass reaches top_p (the most likely token always).
        outside = sorted_probs.cumsum(dim=-1) - sorted_probs >= params.top_p
        # Explicitly: a top_p under float32's smallest positive number (JSON can say
        # 5e-324) is 0 in this comparison, which would zero every token (a NaN draw).
        outside[..., 0] = False
        sorted_probs[outside] = 0.0
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def sample(logits: Tensor, params: SamplingParams, generator: torch.Generator) -> list[int]:
    """One token per row of ``logits [R, V]``.

    Rows are drawn in order from the request's own generator, so a seeded request gives
    the same tokens whatever else is in the batch.
    """
    if params.temperature == 0.0:
        return logits.argmax(dim=-1).tolist()
    probs = sampling_probs(logits, params)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1).tolist()


@dataclass(frozen=True, slots=True)
class Drafts:
    """A request's MTP proposal for its next step: the tokens, and for a sampled request
    the distribution each was drawn from (``[k, V]``; None for greedy drafts)."""

    token_ids: list[int]
    probs: Tensor | None = None


def verify(
    logits: Tensor,
    drafts: Drafts,
    params: SamplingParams,
    generator: torch.Generator,
    accept_all: bool = False,
) -> tuple[list[int], int]:
    """The tokens a step commits for one request, and how many drafts were accepted.

    ``logits [k + 1, V]``: the main model's logits after the request's last committed
    token and after each of its ``k`` drafts. The committed tokens are the accepted
    drafts and one token of the main model's (a correction, or the bonus after them all).
    ``accept_all`` is the broken verifier a test gives the engine: every draft accepted
    unchecked, so the output is no longer the main model's.
    """
    k = len(drafts.token_ids)
    if params.temperature == 0.0:
        targets = logits.argmax(dim=-1).tolist()
        accepted = 0
        while accepted < k and (accept_all or drafts.token_ids[accepted] == targets[accepted]):
            accepted += 1
        return [*drafts.token_ids[:accepted], targets[accepted]], accepted
    p = sampling_probs(logits, params)
    if k == 0:
        return [int(torch.multinomial(p[0], 1, generator=generator))], 0
    if drafts.probs is None:
        raise ValueError("a sampled request's drafts need the distributions they were drawn from")
    q = drafts.probs
    # One uniform per draft, drawn whether or not verification reaches it: the
    # generator advances the same way at every step of the same size.
    uniforms = torch.rand(k, generator=generator)
    accepted = 0
    # Each ratio is computed when verification reaches its draft: a step (one call per
    # request) is dominated by small-tensor overhead, not arithmetic.
    for position, draft in enumerate(drafts.token_ids):
        # q > 0 where the draft was drawn
        if not (accept_all or uniforms[position] < p[position, draft] / q[position, draft]):
            break
        accepted += 1
    if accepted == k:
        last = p[k]
    else:
        residual = (p[accepted] - q[accepted]).clamp_min(0.0)
        # p == q up to rounding: a rejection is (almost) impossible; draw from p.
        last = residual if residual.sum() > 0 else p[accepted]
    token = int(torch.multinomial(last, 1, generator=generator))
    return [*drafts.token_ids[:accepted], token], accepted


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
