"""The figures: the target's outputs against the reference, and against themselves under
load. Pure functions of typed records; the definitions are those of
``collectors.accuracy_records`` (and docs/guides/accuracy.md), computed exactly so here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from moeperf.suites.accuracy.reference_side import ReferencePosition
from moeperf.suites.accuracy.target_side import Position, TargetOutput


def top_k_kl(target_top: Sequence[tuple[int, float]], ref: ReferencePosition) -> float:
    """KL(P_target || P_ref) in nats over the target's top-k tokens and one "other" bucket.

    P_target's "other" mass is 1 minus its top-k mass (clamped at 0: a top-k reported to
    sum a rounding above 1 has none left); P_ref's is the reference's own mass outside the
    k tokens. Terms where P_target is 0 add nothing; P_ref's masses are floored at the
    smallest positive double, so a token the reference rules out costs a large, finite KL.
    """
    p = [math.exp(lp) for _, lp in target_top]
    q = [math.exp(lp) for lp in ref.top_logprobs]
    p.append(max(0.0, 1.0 - sum(p)))
    q.append(ref.other_mass)
    tiny = 5e-324
    return sum(
        pi * (math.log(pi) - math.log(max(qi, tiny))) for pi, qi in zip(p, q, strict=True) if pi > 0
    )


@dataclass(frozen=True, slots=True)
class PromptFigures:
    """One prompt's output against the reference."""

    positions: int
    agreed: int
    first_disagreement: int | None
    kls: tuple[float, ...] | None  # per position; None: no top-k from the target
    max_abs_logprob_diff: float | None  # chosen token; None: no logprobs from the target

    @property
    def agreement(self) -> float | None:
        return self.agreed / self.positions if self.positions else None


def prompt_figures(
    positions: Sequence[Position], reference: Sequence[ReferencePosition]
) -> PromptFigures:
    """Agreement (the reference's argmax is the target's token), KL per position and the
    chosen tokens' logprob difference, position by position."""
    agreed = [ref.argmax == pos.token_id for pos, ref in zip(positions, reference, strict=True)]
    first = next((i for i, ok in enumerate(agreed) if not ok), None)
    kls: tuple[float, ...] | None = None
    if positions and all(p.top is not None for p in positions):
        kls = tuple(top_k_kl(p.top or (), ref) for p, ref in zip(positions, reference, strict=True))
    diffs = [
        abs(p.logprob - ref.chosen_logprob)
        for p, ref in zip(positions, reference, strict=True)
        if p.logprob is not None
    ]
    known = bool(positions) and len(diffs) == len(positions)
    return PromptFigures(len(positions), sum(agreed), first, kls, max(diffs) if known else None)


@dataclass(frozen=True, slots=True)
class LoadComparison:
    """One prompt at concurrency 1 against the high concurrency."""

    diverged: bool
    first_divergence: int | None
    at_tie: bool | None  # None: no divergence, or no logprobs to tell
    max_abs_logprob_delta: float | None  # over the common prefix; None: no logprobs


def compare_under_load(
    alone: TargetOutput, loaded: TargetOutput, tolerance: float
) -> LoadComparison:
    """Where the output at load first differs from the output alone, whether the two
    tokens there were a float-level tie alone (logprobs within ``tolerance``), and the
    largest logprob change of the chosen tokens before it."""
    a, b = alone.positions or (), loaded.positions or ()
    shorter = min(len(a), len(b))
    common = next((i for i in range(shorter) if a[i].token_id != b[i].token_id), shorter)
    diverged = common < max(len(a), len(b))
    first = common if diverged else None
    deltas = [
        abs(x.logprob - y.logprob)
        for x, y in zip(a[:common], b[:common], strict=True)
        if x.logprob is not None and y.logprob is not None
    ]
    delta = max(deltas) if deltas and len(deltas) == common else None
    at_tie = None
    if first is not None and first < len(a) and first < len(b):
        at_tie = _tie(a[first], b[first].token_id, tolerance)
    return LoadComparison(diverged, first, at_tie, delta)


def _tie(alone: Position, other_token: int, tolerance: float) -> bool | None:
    """Whether ``other_token`` was within ``tolerance`` of the chosen token alone (False
    when it was not in the top-k; None without logprobs)."""
    if alone.logprob is None or alone.top is None:
        return None
    others = dict(alone.top)
    if other_token not in others:
        return False
    return alone.logprob - others[other_token] <= tolerance


def perplexity(logprobs: Sequence[float]) -> float:
    """exp(mean negative logprob): of tokens 2..N when given their logprobs."""
    return math.exp(-sum(logprobs) / len(logprobs))


def within_ratio(ratio: float, limit: float) -> bool:
    """``ratio`` in [1 / limit, limit]: neither side more than ``limit`` times the other."""
    return max(ratio, 1.0 / ratio) <= limit
