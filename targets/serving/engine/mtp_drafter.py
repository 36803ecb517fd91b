"""MTP speculative decoding: drafting with the model's multi-token-prediction module.

The MTP module keeps its own attention entries in the KV cache (attention slot
``num_layers``), one per position p, built from the main model's hidden state at p - 1
and the token at p; its output predicts the token at p + 1. After every step each request
catches its entries up to its last committed token. The last entry's prediction is the
first draft; further drafts chain the module on its own output (as vLLM and SGLang do for
more drafts than trained MTP modules), writing entries beyond the committed tokens that the
next step's catch-up overwrites: that is the rollback of rejected drafts.

A greedy request's drafts are the module's argmax; a sampled request's are drawn from the
module's distribution after the request's temperature and top-p (kept with the drafts:
rejection sampling needs it, engine/sampler.py). Verification by the main model decides
what is committed, so the output never depends on the drafts, only the number of steps
does.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from moeperf.targets.model.hybrid import HybridMoETransformer
from moeperf.targets.model.model import MoETransformer
from moeperf.targets.serving.engine import sampler
from moeperf.targets.serving.engine.kv_cache import KVCache
from moeperf.targets.serving.engine.paged_attention import PagedAttention, Segment
from moeperf.targets.serving.engine.sequence import Sequence

_MODULE = 0  # drafts chain the first MTP module


@dataclass
class _Entries:
    """MTP entries for one request in one forward: positions [first, first + count)."""

    seq: Sequence
    first: int
    count: int
    tokens: list[int]
    hidden_prev: Tensor  # [count, C]


class MTPDrafter:
    def __init__(
        self, model: MoETransformer | HybridMoETransformer, cache: KVCache, num_drafts: int
    ):
        if model.config.mtp_depth == 0:
            raise ValueError("the model has no MTP module; serve it with mtp_tokens = 0")
        if cache.hidden is None:
            raise ValueError("MTP needs the hidden states kept in the KV cache")
        self.model = model
        self.cache = cache
        self.hidden: Tensor = cache.hidden  # [slots, C] the main model's, written by the engine
        self.num_drafts = num_drafts
        self.slot = model.mtp_slot(_MODULE)

    def update(self, seqs: list[Sequence], wants_drafts: list[bool]) -> None:
        """Catch up each request's MTP entries to its committed tokens; then, where asked,
        propose up to ``num_drafts`` tokens (left in ``seq.draft_ids``)."""
        entries = [self._catch_up(seq) for seq in seqs]
        out = self._forward(entries)
        last_rows, row = [], 0
        for e in entries:
            row += e.count
            last_rows.append(row - 1)
            e.seq.num_mtp_computed = e.first + e.count
            e.seq.draft_ids = []
            e.seq.draft_probs = []
        drafting = [
            (e.seq, out[r : r + 1])
            for e, r, wants in zip(entries, last_rows, wants_drafts, strict=True)
            if wants and self._draft_budget(e.seq) > 0
        ]
        for depth in range(self.num_drafts):
            drafting = [(s, h) for s, h in drafting if depth < self._draft_budget(s)]
            if not drafting:
                break
            hidden = torch.cat([h for _, h in drafting])
            logits = self.model.mtp_logits(_MODULE, hidden)
            for row, (seq, _) in enumerate(drafting):
                self._propose(seq, logits[row : row + 1])
            if depth + 1 == self.num_drafts:
                break
            chained = [
                _Entries(seq, seq.num_tokens + depth, 1, [seq.draft_ids[-1]], h)
                for seq, h in drafting
            ]
            out = self._forward(chained)
            drafting = [(seq, out[i : i + 1]) for i, (seq, _) in enumerate(drafting)]

    @staticmethod
    def _propose(seq: Sequence, logits: Tensor) -> None:
        if seq.params.temperature == 0.0:
            seq.draft_ids.append(int(logits.argmax()))
            return
        q = sampler.sampling_probs(logits, seq.params)
        seq.draft_ids.append(int(torch.multinomial(q[0], 1, generator=seq.generator)))
        seq.draft_probs.append(q[0])

    def _draft_budget(self, seq: Sequence) -> int:
        # No draft beyond the request's last allowed token: it could never be committed.
        return min(self.num_drafts, seq.params.max_tokens - seq.num_output - 1)

    def _catch_up(self, seq: Sequence) -> _Entries:
        first, last = seq.num_mtp_computed, seq.num_computed  # the token at `last` is known
        prev_slots = self.cache.slots(seq.block_ids(), max(first - 1, 0), last)
        hidden_prev = self.hidden[prev_slots]
        if first == 0:  # position 0 has no predecessor: zeros, as in training
            hidden_prev = torch.cat([torch.zeros_like(hidden_prev[:1]), hidden_prev])
        return _Entries(seq, first, last - first + 1, seq.token_ids[first : last + 1], hidden_prev)

    def _forward(self, entries: list[_Entries]) -> Tensor:
        tokens: list[int] = []
        positions: list[int] = []
        write: list[Tensor] = []
        segments: list[Segment] = []
        row = 0
        for e in entries:
            context = self.cache.slots(e.seq.block_ids(), 0, e.first + e.count)
            segments.append(Segment(row, e.count, e.first, context))
            write.append(context[e.first :])
            tokens.extend(e.tokens)
            positions.extend(range(e.first, e.first + e.count))
            row += e.count
        attend = PagedAttention(self.cache, torch.cat(write), segments)
        return self.model.mtp_forward(
            _MODULE,
            torch.cat([e.hidden_prev for e in entries]),
            torch.tensor(tokens),
            torch.tensor(positions),
            attend,
        )
