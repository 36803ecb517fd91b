"""Linear-attention state: a fixed-size slot per running sequence, beside the paged KV cache.

A hybrid model's linear layers (Gated DeltaNet, ``targets.model.gated_deltanet``) keep, per
sequence and layer, the last ``kernel - 1`` inputs of their short convolution and a
``Hv x dk x dv`` recurrent matrix. Unlike KV, that state does not grow with the context:
one slot per running request (``max_running_requests`` slots), taken when the request
first runs and zeroed then, given back when it finishes or is preempted (a preempted
request computes its tokens again from position 0, so from a zero state).

A step's ``PagedLinear`` is the model's ``LinearFn``: it reads each sequence's state from
its slot, runs the layer over the sequence's new tokens, and writes the state back. A
sequence being verified with MTP drafts keeps the state after each of its fed tokens
instead; once the engine knows how many were accepted, ``commit`` writes the one after the
last accepted token (the rollback of rejected drafts: their updates are never kept).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from moeperf.targets.model.gated_deltanet import GatedDeltaNet, LinearState
from moeperf.targets.model.hybrid import HybridMoETransformer
from moeperf.targets.serving.engine.sequence import Sequence

_BATCHED_MAX_TOKENS = 8  # segments this short (decode, verification) run batched


class LinearStateCache:
    def __init__(self, model: HybridMoETransformer, num_slots: int, dtype: torch.dtype):
        layers = model.linear_layers
        self.conv = [
            torch.zeros(num_slots, layer.conv_dim, layer.kernel - 1, dtype=dtype)
            for layer in layers
        ]
        self.recurrent = [
            torch.zeros(num_slots, layer.num_v_heads, layer.dk, layer.dv) for layer in layers
        ]
        self._free = list(range(num_slots - 1, -1, -1))
        self._owner: dict[int, int] = {}  # id(sequence) -> slot
        # With MTP: per sequence, each layer's state after every fed token of its step.
        self._pending: dict[int, list[LinearState]] = {}

    @property
    def bytes_per_sequence(self) -> int:
        """The state one sequence holds in all linear layers (conv and recurrent)."""
        conv = sum(t[0].numel() * t.element_size() for t in self.conv)
        return conv + sum(t[0].numel() * t.element_size() for t in self.recurrent)

    @property
    def slots_in_use(self) -> int:
        return len(self._owner)

    def slot(self, seq: Sequence) -> int:
        """The sequence's slot, taken and zeroed on its first call."""
        slot = self._owner.get(id(seq))
        if slot is None:
            if not self._free:
                raise RuntimeError("no free linear-state slot: more running than slots")
            slot = self._free.pop()
            for tensor in (*self.conv, *self.recurrent):
                tensor[slot].zero_()
            self._owner[id(seq)] = slot
        return slot

    def release(self, seq: Sequence) -> None:
        """The sequence finished or was preempted: its state is gone."""
        slot = self._owner.pop(id(seq), None)
        self._pending.pop(id(seq), None)
        if slot is not None:
            self._free.append(slot)

    def commit(self, seq: Sequence, kept_tokens: int) -> None:
        """After verification: keep the state after the first ``kept_tokens`` fed tokens."""
        steps = self._pending.pop(id(seq), None)
        if steps is None:
            return
        slot = self._owner[id(seq)]
        for layer, state in enumerate(steps):
            self.conv[layer][slot] = state.conv[kept_tokens - 1]
            self.recurrent[layer][slot] = state.recurrent[kept_tokens - 1]

    def keep_steps(self, seq: Sequence, layer: int, steps: LinearState) -> None:
        kept = self._pending.setdefault(id(seq), [])
        if len(kept) == layer:
            kept.append(steps)
        else:
            kept[layer] = steps


@dataclass(frozen=True)
class LinearSegment:
    token_start: int  # index of the first new token in the step's flat tokens
    num_tokens: int
    seq: Sequence
    verifying: bool  # fed MTP drafts: keep the state after each token for ``commit``


class PagedLinear:
    """A ``LinearFn`` for one forward over packed tokens (module docstring)."""

    def __init__(self, cache: LinearStateCache, segments: list[LinearSegment]):
        self.cache = cache
        self.slots = {id(s.seq): cache.slot(s.seq) for s in segments}
        self.long = [s for s in segments if s.num_tokens > _BATCHED_MAX_TOKENS]
        short: dict[tuple[int, bool], list[LinearSegment]] = {}
        for s in segments:
            if s.num_tokens <= _BATCHED_MAX_TOKENS:
                short.setdefault((s.num_tokens, s.verifying), []).append(s)
        # Equal lengths run as one batch; each batch's rows and slots, the same for every
        # layer of the forward, are built once here.
        self.groups = [
            (
                group,
                torch.cat(
                    [torch.arange(s.token_start, s.token_start + s.num_tokens) for s in group]
                ),
                torch.tensor([self.slots[id(s.seq)] for s in group]),
            )
            for group in [[s] for s in self.long] + list(short.values())
        ]

    def __call__(self, layer: GatedDeltaNet, mixed_qkv: Tensor, g: Tensor, beta: Tensor) -> Tensor:
        out = torch.empty(mixed_qkv.shape[0], layer.num_v_heads, layer.dv, dtype=mixed_qkv.dtype)
        for group, rows, slots in self.groups:
            length, verifying = group[0].num_tokens, group[0].verifying
            index = layer.linear_slot
            state = LinearState(self.cache.conv[index][slots], self.cache.recurrent[index][slots])
            shape = (len(group), length)
            core, new = layer.core(
                mixed_qkv[rows].view(*shape, -1),
                g[rows].view(*shape, -1),
                beta[rows].view(*shape, -1),
                state,
                every_step=verifying,
            )
            out[rows] = core.reshape(len(group) * length, layer.num_v_heads, layer.dv)
            if verifying:
                for b, s in enumerate(group):
                    self.cache.keep_steps(s.seq, index, LinearState(new.conv[b], new.recurrent[b]))
            else:
                self.cache.conv[index][slots] = new.conv
                self.cache.recurrent[index][slots] = new.recurrent
        return out
