"""Fit a router-logit bias so a micro-batch's real top-k routing hits a skew profile's target,
and install it on a model (``install`` -> ``SkewHandle``).

Megatron's ``moe_router_force_biased`` adds a bias to the router logits to force skew. Here
the bias is fitted, per layer and micro-batch, to this micro-batch's own logits: the target
loads (``skew.MicrobatchTarget``) become token counts, and the bias moves each expert's
threshold until that many tokens pick it.

The fit, for logits z = x + b ``[N, E]``: token n picks expert e iff z[n, e] beats the k-th
largest of its other experts' z, that is iff its margin m[n, e] = z[n, e] - that threshold is
positive. Given the other experts' biases, setting b[e] -= (t-th + (t+1)-th largest margin) / 2
gives expert e exactly t tokens. Doing that for all experts at once overshoots (they move
together), so each step takes ``FIT_DAMPING`` of it; it stops when every count matches, and
otherwise returns the best bias seen after ``FIT_MAX_ITERS`` steps. On random logits with
N = 64..4096 and k = 2 of 8, it matches exactly in about 10 steps, each a top-(k+1) and a few
``[N, E]`` element-wise ops plus 2E order statistics over N.

The fit is deterministic: the same logits and target give the same bias, bit for bit; the
handle adds what recompute in a pipeline needs (see ``SkewHandle``).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor

from moeperf.targets.model.model import MoETransformer
from moeperf.targets.model.moe import MoE
from moeperf.targets.training.skew import MicrobatchTarget, RoutingShape, SkewProfile

FIT_DAMPING = 0.7  # 0.5 to 0.8 converge in ~10 steps on random logits; 1.0 oscillates
FIT_MAX_ITERS = 30


def target_counts(load_fraction: Tensor, num_tokens: int, top_k: int) -> Tensor:
    """``[E]`` shares -> ``[E]`` int64 token-slot counts summing to ``num_tokens * top_k``,
    none above ``num_tokens`` (a token picks an expert once), by largest remainder."""
    num_slots = num_tokens * top_k
    exact = load_fraction.double().clamp(min=0) * num_slots / load_fraction.sum()
    counts = exact.floor().clamp(max=num_tokens).long()
    remainder = exact - counts
    while (short := num_slots - int(counts.sum())) > 0:
        open_ = counts < num_tokens
        order = torch.where(open_, remainder, -torch.inf).argsort(descending=True, stable=True)
        take = order[: min(short, int(open_.sum()))]
        counts[take] += 1
        remainder[take] = -1.0
    return counts


def routed_counts(logits: Tensor, bias: Tensor, top_k: int) -> Tensor:
    """``[E]`` token-slots per expert exactly as ``MoE.forward`` routes: softmax, top-k."""
    probs = torch.softmax(logits + bias, dim=-1, dtype=torch.float)
    chosen = probs.topk(top_k, dim=-1).indices
    return torch.bincount(chosen.flatten(), minlength=logits.shape[-1])


def fit_router_bias(
    logits: Tensor, target: Tensor, top_k: int, max_iters: int = FIT_MAX_ITERS
) -> Tensor:
    """The bias ``[E]`` (float32, mean zero) that makes ``logits [N, E]`` route ``target [E]``
    token-slots to each expert, or as close as ``max_iters`` damped steps get."""
    with torch.no_grad():
        x = logits.detach().float()
        num_experts = x.shape[-1]
        want = target.to(x.device)
        bias = torch.zeros(num_experts, device=x.device)
        best, best_error = bias, None
        for _ in range(max_iters):
            z = x + bias
            top = z.topk(min(top_k + 1, num_experts), dim=-1).values  # [N, k+1]
            kth = top[:, top_k - 1 : top_k]  # [N, 1]
            chosen = z >= kth  # [N, E]
            error = int((chosen.sum(dim=0) - want).abs().max())
            if best_error is None or error < best_error:
                best, best_error = bias, error
            if error == 0 or top_k == num_experts:
                break
            threshold = torch.where(chosen, top[:, top_k : top_k + 1], kth)
            margin = (z - threshold).t().contiguous()  # [E, N]
            bias = bias - FIT_DAMPING * _midpoints(margin, want.tolist())
        return best - best.mean()


def _midpoints(margin: Tensor, counts: list[int]) -> Tensor:
    """``[E]``: for each row of ``margin [E, N]``, halfway between its t-th and (t+1)-th
    largest values (t = counts[e]); a unit past the end when t is 0 or N."""
    num_tokens = margin.shape[1]
    out = torch.empty(len(counts), device=margin.device)
    for e, t in enumerate(counts):
        row = margin[e]
        above = row.kthvalue(num_tokens - t + 1).values if t > 0 else row.max() + 1
        below = row.kthvalue(num_tokens - t).values if t < num_tokens else row.min() - 1
        out[e] = (above + below) / 2
    return out


# -- installing a profile on a model ---------------------------------------------------------

# Routings remembered for recompute: enough for every micro-batch a pipeline keeps in flight.
REMEMBERED_ROUTINGS = 1024  # (layer, logits) pairs


class SkewHandle:
    """A profile installed as the router bias of a model's main MoE layers.

    ``set_microbatch(m)`` before each micro-batch's forward; ``remove()`` restores the layers'
    previous biases. The MTP modules' layers are left alone: profiles and
    ``ModelOutput.tokens_per_expert`` cover the main layers only.

    Recompute: a layer recomputed in backward (activation checkpointing) must route as its
    forward did. The fitted bias is a pure function of (micro-batch, layer, logits), so a
    recompute while its micro-batch is current routes the same. A 1F1B pipeline recomputes
    micro-batch m after later micro-batches' forwards, though, so the handle also remembers
    each (layer, logits) it has fitted: a layer the current micro-batch has already routed,
    called again with logits seen before, is a recompute and gets that forward's bias back.
    A new micro-batch's forward is always fitted to its own target, even if its logits repeat
    an earlier one's (the same batch through the same weights). ``at_microbatch(m)`` routes as
    micro-batch m explicitly, for a schedule that knows what it is recomputing.
    """

    def __init__(self, model: MoETransformer, profile: SkewProfile, microbatch: int = 0):
        self.profile = profile
        self.shape = RoutingShape.of(model.config)
        profile.check(self.shape)
        self.microbatch = microbatch
        self._cached: tuple[int, MicrobatchTarget | None] | None = None
        self._fitted: OrderedDict[tuple[int, bytes], Tensor] = OrderedDict()  # (layer, logits)
        self._routed: OrderedDict[tuple[int, int], None] = OrderedDict()  # (micro-batch, layer)
        self._layers: list[MoE] = [block.block_sparse_moe for block in model.blocks]
        self._previous = [layer.router_bias for layer in self._layers]
        self._bias_fn = self.bias  # one bound method, so remove() can tell it is still ours
        for layer in self._layers:
            layer.router_bias = self._bias_fn

    def set_microbatch(self, microbatch: int) -> None:
        self.microbatch = microbatch

    @contextmanager
    def at_microbatch(self, microbatch: int) -> Iterator[None]:
        """Route as micro-batch ``microbatch`` inside the block."""
        current, self.microbatch = self.microbatch, microbatch
        try:
            yield
        finally:
            self.microbatch = current

    def target(self) -> MicrobatchTarget | None:
        """The current micro-batch's target (drawn once per micro-batch)."""
        if self._cached is None or self._cached[0] != self.microbatch:
            self._cached = (self.microbatch, self.profile.target(self.microbatch, self.shape))
        return self._cached[1]

    def bias(self, layer: int, logits: Tensor) -> Tensor:
        """The router bias ``[E]`` for ``layer`` given its detached ``logits [N, E]``."""
        target = self.target()
        if target is None or logits.shape[0] == 0:
            return torch.zeros(logits.shape[-1], dtype=logits.dtype, device=logits.device)
        # One copy to host memory per layer: the fit's many small steps and its reads of
        # counts would each wait for the device if run there.
        host = logits.detach().cpu()
        key = (layer, _fingerprint(host))
        if (self.microbatch, layer) in self._routed and key in self._fitted:
            return self._fitted[key]  # a recompute in backward
        counts = target_counts(target.load_fraction[layer], logits.shape[0], self.shape.top_k)
        bias = fit_router_bias(host, counts, self.shape.top_k).to(logits.device)
        _remember(self._fitted, key, bias)
        _remember(self._routed, (self.microbatch, layer), None)
        return bias

    def remove(self) -> None:
        """Give each layer back the bias it had before, unless someone has replaced ours."""
        for layer, previous in zip(self._layers, self._previous, strict=True):
            if layer.router_bias is self._bias_fn:
                layer.router_bias = previous
        self._layers, self._previous = [], []


def _fingerprint(logits: Tensor) -> bytes:
    """A digest of the logits' shape, dtype and bits: equal only for bitwise-equal logits."""
    raw = logits.detach().contiguous().view(torch.uint8).cpu().numpy().tobytes()
    header = f"{tuple(logits.shape)}{logits.dtype}".encode()
    return hashlib.blake2b(header + raw, digest_size=16).digest()


def _remember(memory: OrderedDict, key: object, value: object) -> None:
    memory[key] = value
    memory.move_to_end(key)
    if len(memory) > REMEMBERED_ROUTINGS:
        memory.popitem(last=False)


def install(model: MoETransformer, profile: SkewProfile, microbatch: int = 0) -> SkewHandle:
    """Install ``profile`` on ``model``'s main MoE layers, starting at ``microbatch``; raises
    ``SkewProfileError`` if the profile cannot drive this model (a replay file's shape)."""
    return SkewHandle(model, profile, microbatch)
