"""The report blocks of an accuracy run: the figures with their thresholds and verdicts,
what was measured around them (perplexity, the load pass), the per-prompt table archived
with the run, and the definitions the summary carries."""

from __future__ import annotations

import pandas as pd

from moeperf.collectors.accuracy_records import PROMPT_TABLE_FILE, AccuracySummary, prompt_frame
from moeperf.reports.render import Table

_PROMPT_COLUMNS = {
    "prompt_id": "prompt",
    "prompt_tokens": "prompt tokens",
    "output_tokens": "output tokens",
    "agreed_positions": "agreed",
    "top1_agreement": "top-1 agreement",
    "first_disagreement": "first disagreement",
    "mean_kl": "mean KL nats",
    "max_kl": "max KL nats",
    "max_abs_logprob_diff": "max |Δ logprob| vs reference",
    "load_output_tokens": "output tokens under load",
    "load_diverged": "diverged under load",
    "load_first_divergence": "divergence starts at",
    "load_divergence_at_tie": "at a tie",
    "load_max_abs_logprob_delta": "max |Δ logprob| under load",
}


def _threshold(comparison: str, threshold: float) -> str:
    if comparison.startswith("within"):
        return f"within 1/{threshold:g} and {threshold:g}"
    return f"{comparison} {threshold:g}"


def figures_table(summary: AccuracySummary) -> Table:
    frame = pd.DataFrame(
        [
            {
                "figure": f.name,
                "value": f.value,
                "threshold": _threshold(f.comparison, f.threshold),
                "verdict": f.status,
                "why": f.reason or "",
            }
            for f in summary.figures
        ]
    )
    ref = summary.reference
    caption = (
        f"Verdict: {summary.verdict}. {summary.positions} greedy output positions "
        f"(up to {summary.output_tokens} per prompt, top-{summary.top_k} logprobs) of the "
        f"target (serving in {summary.target_dtype or 'a dtype it does not state'}) against "
        f"{ref.implementation} in {ref.dtype} on the {ref.device}, loading {ref.model_dir}, "
        "teacher-forced on the target's own tokens. A figure not available from this target "
        "is stated, never failed. KL and logprobs in nats."
    )
    return Table(frame, caption, answers=True)


def detail_table(summary: AccuracySummary) -> Table:
    rows: list[dict[str, object]] = [
        {"measure": "KL per position, mean (nats)", "value": summary.mean_kl},
        {"measure": "KL per position, max (nats)", "value": summary.max_kl},
    ]
    ppl = summary.perplexity
    if ppl is not None:
        rows += [
            {"measure": f"held-out perplexity, reference ({ppl.scored_tokens} tokens)",
             "value": ppl.reference},
            {"measure": f"held-out perplexity, target ({ppl.source or 'not available'})",
             "value": ppl.target},
        ]  # fmt: skip
    load = summary.load
    if load is not None:
        starts = ", ".join(str(p) for p in load.first_divergences) or "none"
        rows += [
            {"measure": "under load: requests in flight at once", "value": load.concurrency},
            {"measure": "under load: prompts diverged / prompts",
             "value": f"{load.diverged} / {load.prompts} ({load.diverged_at_ties} at ties)"},
            {"measure": "under load: divergence rate", "value": load.divergence_rate},
            {"measure": "under load: divergences start at (output position)", "value": starts},
            {"measure": "under load: max |Δ logprob| on the common prefix (nats)",
             "value": load.max_abs_logprob_delta},
            {"measure": "under load: the target's preemptions meanwhile",
             "value": load.preemptions},
            {"measure": "under load: prompt tokens from its prefix cache meanwhile",
             "value": load.prefix_cache_hit_tokens},
        ]  # fmt: skip
    return Table(pd.DataFrame(rows), "What the figures were computed from.")


def prompts_table(summary: AccuracySummary) -> Table:
    frame = prompt_frame(summary.prompts).rename(columns=_PROMPT_COLUMNS)
    return Table(
        frame,
        f"Per prompt (archived with the run as {PROMPT_TABLE_FILE}); positions are 0-based "
        "output positions.",
    )


def definitions_table(summary: AccuracySummary) -> Table:
    frame = pd.DataFrame(
        [{"term": name, "definition": text} for name, text in summary.definitions.items()]
    )
    return Table(frame, "Definitions (collectors/accuracy_records.py; docs/guides/accuracy.md).")


def accuracy_blocks(summary: AccuracySummary | None) -> list[Table]:
    if summary is None:
        return [Table(pd.DataFrame({"summary": ["none"]}), "The run ended before its summary.")]
    return [
        figures_table(summary),
        detail_table(summary),
        prompts_table(summary),
        definitions_table(summary),
    ]
