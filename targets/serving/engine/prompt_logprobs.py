"""Prompt log-probabilities: each prompt token's logprob given the tokens before it, its
rank, and the top n at its position, from the prefill forward that fills the cache.

A step feeds a request's tokens ``[start, start + num_new)``; the hidden state of position
p gives the logits that predict token p + 1, so a prefill chunk yields the prompt logprobs
of tokens ``start + 1 .. start + num_new`` (those still inside the prompt; position
``prompt_len - 1`` predicts the first output token, which the sampler handles). The first
prompt token has no context and no logprob: its entry is None, as OpenAI and vLLM report
it. Chunked prefill fills the list chunk by chunk; a preempted request recomputed from
position 0 finds its entries already there and adds none.

A request that asks for them must compute every prompt position, so the scheduler gives
it no prefix-cache hit (``Scheduler._take_prefix_hit``), as vLLM's does: cached blocks hold
keys and values, not the logits these need.
"""

from __future__ import annotations

import torch
from torch import Tensor

from moeperf.targets.model.hybrid import HybridMoETransformer
from moeperf.targets.model.model import MoETransformer
from moeperf.targets.serving.engine.api import TokenLogprob
from moeperf.targets.serving.engine.scheduler import ScheduledSeq
from moeperf.targets.serving.engine.sequence import Sequence


def collect(
    model: MoETransformer | HybridMoETransformer, batch: list[ScheduledSeq], hidden: Tensor
) -> None:
    """Append the prompt logprobs this step's forward computed (``hidden [N, hidden]``,
    the step's rows in batch order) to each request that asked for them."""
    row = 0
    for item in batch:
        top_n = item.seq.params.prompt_logprobs
        if top_n is not None:
            _collect_one(model, item.seq, item.start, hidden[row : row + item.num_new], top_n)
        row += item.num_new + len(item.drafts)


def _collect_one(
    model: MoETransformer | HybridMoETransformer,
    seq: Sequence,
    start: int,
    hidden: Tensor,
    top_n: int,
) -> None:
    entries = seq.prompt_logprobs
    if not entries:
        entries.append(None)  # the first prompt token
    # Row r is position start + r and predicts token start + r + 1: the rows wanted are those
    # of tokens not yet collected (len(entries) onwards), up to the last prompt token.
    lo = max(len(entries) - 1 - start, 0)
    hi = min(hidden.shape[0], seq.prompt_len - 1 - start)
    if lo >= hi:
        return
    # Gaps cannot arise: without prefix-cache hits a prompt is fed in order from position 0.
    assert start + lo + 1 == len(entries), "prompt logprobs are collected in order"
    log_probs = torch.log_softmax(model.logits(hidden[lo:hi]).float(), dim=-1)  # [R, V]
    targets = torch.tensor(seq.token_ids[start + lo + 1 : start + hi + 1])  # [R]
    chosen = log_probs.gather(1, targets[:, None])[:, 0]  # [R]
    ranks = (log_probs > chosen[:, None]).sum(dim=-1) + 1  # [R], 1 = most likely
    best = log_probs.topk(top_n, dim=-1) if top_n else None
    for r, (token_id, logprob, rank) in enumerate(
        zip(targets.tolist(), chosen.tolist(), ranks.tolist(), strict=True)
    ):
        top: tuple[tuple[int, float], ...] = ()
        if best is not None:
            top = tuple(zip(best.indices[r].tolist(), best.values[r].tolist(), strict=True))
        entries.append(TokenLogprob(token_id, logprob, top, rank))


def take(seq: Sequence) -> tuple[TokenLogprob | None, ...] | None:
    """The request's prompt logprobs for its output, once: when asked for, complete and not
    handed out before (None otherwise)."""
    if seq.params.prompt_logprobs is None or seq.prompt_logprobs_sent:
        return None
    if len(seq.prompt_logprobs) < seq.prompt_len:
        return None
    seq.prompt_logprobs_sent = True
    return tuple(seq.prompt_logprobs)
