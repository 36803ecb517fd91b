"""From a step's hidden states to committed tokens: each sampling request's logits
computed, its MTP drafts verified (engine/sampler.py), its tokens appended up to a stop,
and the speculation counted.

Apart from ``engine.py``: this is the step's per-request arithmetic on one forward's
outputs; the engine only hands it the batch and the parts of its state it updates.
"""

from __future__ import annotations

import torch
from torch import Tensor

from moeperf.targets.model.hybrid import HybridMoETransformer
from moeperf.targets.model.model import MoETransformer
from moeperf.targets.serving.engine import sampler
from moeperf.targets.serving.engine.api import EngineCounters, TokenLogprob
from moeperf.targets.serving.engine.linear_state import LinearStateCache
from moeperf.targets.serving.engine.scheduler import ScheduledSeq
from moeperf.targets.serving.engine.sequence import Sequence


def sample_and_commit(
    model: MoETransformer | HybridMoETransformer,
    batch: list[ScheduledSeq],
    hidden: Tensor,
    *,
    linear: LinearStateCache | None,
    counters: EngineCounters,
    eos_token_ids: frozenset[int],
    unsafe_accept_all_drafts: bool,
) -> dict[Sequence, tuple[list[int], list[TokenLogprob] | None]]:
    """The tokens (and their logprobs, where asked for) each sampling request of
    ``batch`` commits this step; every request's computed count advanced."""
    # Rows whose logits are needed: a sampling request's last fed token and its drafts.
    rows: list[int] = []
    spans: list[tuple[ScheduledSeq, int, int]] = []  # (item, first row, rows)
    row = 0
    for item in batch:
        n = item.num_new + len(item.drafts)
        if item.samples:
            first = row + item.num_new - 1
            spans.append((item, len(rows), len(item.drafts) + 1))
            rows.extend(range(first, first + len(item.drafts) + 1))
        row += n
    if not rows:
        for item in batch:
            item.seq.num_computed += item.num_new
        return {}
    logits = model.logits(hidden[torch.tensor(rows)]).float()
    committed: dict[Sequence, tuple[list[int], list[TokenLogprob] | None]] = {}
    sampled = {id(item) for item, _, _ in spans}
    for item in batch:
        if id(item) not in sampled:
            item.seq.num_computed += item.num_new
    for item, offset, count in spans:
        seq = item.seq
        item_logits = logits[offset : offset + count]
        drafts = sampler.Drafts(item.drafts, _draft_probs(seq, len(item.drafts)))
        tokens, accepted = sampler.verify(
            item_logits, drafts, seq.params, seq.generator, unsafe_accept_all_drafts
        )
        _count_speculation(counters, item.drafts, accepted)
        seq.num_computed = item.start + item.num_new + accepted
        if linear is not None:  # keep the linear state of the accepted tokens only
            linear.commit(seq, item.num_new + accepted)
        tokens = _append_with_stops(seq, tokens, eos_token_ids, counters)
        top_n = seq.params.logprobs
        lps = (
            sampler.logprobs(item_logits[: len(tokens)], tokens, top_n)
            if top_n is not None
            else None
        )
        committed[seq] = (tokens, lps)
    return committed


def _draft_probs(seq: Sequence, count: int) -> Tensor | None:
    """The distributions a sampled request's first ``count`` drafts were drawn from."""
    if not count or seq.params.temperature == 0.0:
        return None
    return torch.stack(seq.draft_probs[:count])


def _count_speculation(counters: EngineCounters, drafts: list[int], accepted: int) -> None:
    if not drafts:
        return
    counters.spec_decode_drafts += 1
    counters.spec_decode_draft_tokens += len(drafts)
    counters.spec_decode_accepted_tokens += accepted
    for position in range(accepted):
        counters.spec_decode_accepted_per_position[position] += 1


def _append_with_stops(
    seq: Sequence, tokens: list[int], eos_token_ids: frozenset[int], counters: EngineCounters
) -> list[int]:
    params, kept = seq.params, []
    for token in tokens:
        seq.token_ids.append(token)
        kept.append(token)
        counters.generation_tokens += 1
        if (not params.ignore_eos and token in eos_token_ids) or token in params.stop_token_ids:
            seq.finish_reason = "stop"
        elif seq.num_output >= params.max_tokens:
            seq.finish_reason = "length"
        if seq.finish_reason:
            break
    return kept
