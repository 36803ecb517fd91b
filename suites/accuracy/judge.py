"""From what both sides measured to the summary: figures per prompt and pooled, each
held against its threshold, and the verdict. A figure the target's answers cannot give
is "not available from this target", with the reason, and never fails the suite."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from moeperf.collectors.accuracy_records import (
    NOT_AVAILABLE,
    AccuracySummary,
    Figure,
    LoadFigures,
    PerplexityFigures,
    PromptRow,
    ReferenceSide,
)
from moeperf.suites.accuracy.compare import (
    LoadComparison,
    PromptFigures,
    compare_under_load,
    perplexity,
    prompt_figures,
    within_ratio,
)
from moeperf.suites.accuracy.prompts import Prompt, PromptSet
from moeperf.suites.accuracy.reference_side import ReferencePosition
from moeperf.suites.accuracy.spec import ThresholdsSpec
from moeperf.suites.accuracy.target_side import HeldoutLogprobs, TargetOutput


@dataclass(frozen=True, slots=True)
class Measured:
    """Everything the run measured, before any figure is computed."""

    prompts: PromptSet
    alone: Sequence[TargetOutput]  # concurrency 1, in prompt order
    loaded: Sequence[TargetOutput]  # the high concurrency, in prompt order
    concurrency: int
    reference: Sequence[Sequence[ReferencePosition] | None]  # per prompt (None: no ids)
    heldout_target: HeldoutLogprobs
    heldout_reference: Sequence[float]  # tokens 2..N
    preemptions: int | None = None  # the target's, over the high-concurrency pass
    prefix_cache_hit_tokens: int | None = None


def _figure(
    name: str, value: float | None, threshold: float, comparison: str, ok: bool, why: str | None
) -> Figure:
    if value is None:
        return Figure(name, None, threshold, comparison, "not available", why)
    return Figure(name, value, threshold, comparison, "pass" if ok else "fail")


def _unavailable(outputs: Sequence[TargetOutput], need_top: bool = False) -> str | None:
    """Why these outputs cannot give a figure (None: they can)."""
    for out in outputs:
        if out.positions is None:
            return f"{NOT_AVAILABLE}: {out.missing}"
        if need_top and any(p.top is None for p in out.positions):
            return f"{NOT_AVAILABLE}: {out.missing or 'no top-k logprobs'}"
    return None


def summarize(
    m: Measured,
    thresholds: ThresholdsSpec,
    *,
    output_tokens: int,
    top_k: int,
    reference: ReferenceSide,
    target_dtype: str | None,
) -> AccuracySummary:
    per_prompt: list[PromptFigures | None] = [
        prompt_figures(out.positions, ref) if out.positions is not None and ref is not None
        else None
        for out, ref in zip(m.alone, m.reference, strict=True)
    ]  # fmt: skip
    loads = [
        compare_under_load(a, b, thresholds.logprob_tolerance)
        if a.positions is not None and b.positions is not None
        else None
        for a, b in zip(m.alone, m.loaded, strict=True)
    ]
    unavailable: dict[str, str] = {}
    why_ids = _unavailable(m.alone)
    why_top = _unavailable(m.alone, need_top=True)
    why_load = _unavailable([*m.alone, *m.loaded])
    known = [f for f in per_prompt if f is not None]
    positions = sum(f.positions for f in known)
    agreement = sum(f.agreed for f in known) / positions if why_ids is None and positions else None
    if why_ids is None and not positions:
        why_ids = "the target generated no output tokens"
    kls = [kl for f in known for kl in f.kls or ()] if why_top is None else []
    mean_kl = sum(kls) / len(kls) if kls else None
    max_kl = max(kls) if kls else None
    ppl = _perplexity(m)
    load = _load(m, loads) if why_load is None else None
    lp_delta = load.max_abs_logprob_delta if load is not None else None
    why_delta = why_load
    if load is not None and lp_delta is None:
        why_delta = f"{NOT_AVAILABLE}: its completions carry no logprobs"
    t = thresholds
    unexplained = (
        (load.diverged - load.diverged_at_ties) / load.prompts if load is not None else None
    )
    figures = (
        _figure("top1_agreement", agreement, t.min_top1_agreement, ">=",
                agreement is not None and agreement >= t.min_top1_agreement, why_ids),
        _figure("mean_kl", mean_kl, t.max_mean_kl, "<=",
                mean_kl is not None and mean_kl <= t.max_mean_kl, why_top),
        _figure("perplexity_ratio", ppl.ratio, t.max_perplexity_ratio, "within 1/x and x",
                ppl.ratio is not None and within_ratio(ppl.ratio, t.max_perplexity_ratio),
                f"{NOT_AVAILABLE}: {m.heldout_target.missing}"),
        _figure("load_divergence_rate", unexplained, t.max_load_divergence_rate, "<=",
                unexplained is not None and unexplained <= t.max_load_divergence_rate,
                why_load),
        _figure("load_max_abs_logprob_delta", lp_delta, t.logprob_tolerance, "<=",
                lp_delta is not None and lp_delta <= t.logprob_tolerance, why_delta),
    )  # fmt: skip
    for f in figures:
        if f.status == "not available" and f.reason:
            unavailable[f.name] = f.reason
    rows = tuple(
        _row(p, out, f, load_out, cmp)
        for p, out, f, load_out, cmp in zip(
            m.prompts.prompts, m.alone, per_prompt, m.loaded, loads, strict=True
        )
    )
    return AccuracySummary(
        verdict="fail" if any(f.status == "fail" for f in figures) else "pass",
        figures=figures,
        prompts=rows,
        positions=positions,
        output_tokens=output_tokens,
        top_k=top_k,
        top1_agreement=agreement,
        mean_kl=mean_kl,
        max_kl=max_kl,
        perplexity=ppl,
        load=load,
        reference=reference,
        target_dtype=target_dtype,
        unavailable=unavailable,
    )


def _perplexity(m: Measured) -> PerplexityFigures:
    reference = perplexity(m.heldout_reference)
    found = m.heldout_target.logprobs
    target = perplexity(found) if found else None
    return PerplexityFigures(
        scored_tokens=len(m.heldout_reference),
        reference=reference,
        target=target,
        ratio=target / reference if target is not None else None,
        source=m.heldout_target.source,
    )


def _load(m: Measured, loads: Sequence[LoadComparison | None]) -> LoadFigures:
    known = [c for c in loads if c is not None]
    diverged = [c for c in known if c.diverged]
    deltas = [c.max_abs_logprob_delta for c in known]
    return LoadFigures(
        concurrency=min(m.concurrency, len(m.loaded)),
        prompts=len(known),
        diverged=len(diverged),
        diverged_at_ties=sum(1 for c in diverged if c.at_tie),
        divergence_rate=len(diverged) / len(known) if known else 0.0,
        first_divergences=tuple(
            c.first_divergence for c in diverged if c.first_divergence is not None
        ),
        max_abs_logprob_delta=max(d for d in deltas if d is not None)
        if deltas and all(d is not None for d in deltas)
        else None,
        preemptions=m.preemptions,
        prefix_cache_hit_tokens=m.prefix_cache_hit_tokens,
    )


def _row(
    prompt: Prompt,
    out: TargetOutput,
    figures: PromptFigures | None,
    loaded: TargetOutput,
    cmp: LoadComparison | None,
) -> PromptRow:
    kls = figures.kls if figures is not None else None
    return PromptRow(
        prompt_id=prompt.prompt_id,
        prompt_tokens=len(prompt.token_ids),
        output_tokens=len(out.positions or ()),
        agreed_positions=figures.agreed if figures is not None else None,
        top1_agreement=figures.agreement if figures is not None else None,
        first_disagreement=figures.first_disagreement if figures is not None else None,
        mean_kl=sum(kls) / len(kls) if kls else None,
        max_kl=max(kls) if kls else None,
        max_abs_logprob_diff=figures.max_abs_logprob_diff if figures is not None else None,
        load_output_tokens=len(loaded.positions) if loaded.positions is not None else None,
        load_diverged=cmp.diverged if cmp is not None else None,
        load_first_divergence=cmp.first_divergence if cmp is not None else None,
        load_divergence_at_tie=cmp.at_tie if cmp is not None else None,
        load_max_abs_logprob_delta=cmp.max_abs_logprob_delta if cmp is not None else None,
    )
