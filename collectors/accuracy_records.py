"""The accuracy-alignment suite's summary: is the served model the model?

A fixed prompt set is sent to the target greedily (temperature 0) with top-k logprobs;
a reference implementation of the same weights (Hugging Face transformers, float32, CPU)
is run teacher-forced on the target's own tokens. Definitions (docs/guides/
accuracy.md; ``suites/accuracy/compare.py`` computes them exactly so):

- top-1 agreement: over every position of the target's greedy outputs at concurrency 1
  (all prompts pooled), the fraction where the reference's argmax, given the same prefix
  (the prompt and the target's own previous output tokens), is the target's token.
- KL per position: KL(P_target || P_ref) over k + 1 outcomes, the target's top-k tokens
  at that position and "every other token": P_target's mass on the others is 1 minus its
  top-k mass, P_ref's is its own mass outside those k tokens. It is the full-vocabulary KL
  coarse-grained, so never above it (data-processing inequality), and 0 only when both put
  the same mass on each of the k tokens. Reported: the mean over all positions (pooled),
  the max, and per prompt. In nats.
- perplexity of the held-out text: exp(mean negative logprob of tokens 2..N), token 1
  having no context, from the target's prompt logprobs (echo, else vLLM's
  prompt_logprobs) and from the reference; the ratio is target / reference. Without
  prompt logprobs from the target: "not available from this target".
- under load: the same prompts at concurrency 1 and at the high level, greedy. A prompt
  diverges when its output tokens differ; its first differing position is where the
  divergence starts. A divergence "at a tie" starts where, at concurrency 1, the two
  tokens' logprobs were within ``logprob_tolerance`` of each other (a float-level tie,
  which batching may break either way). The divergence rate is diverging prompts /
  prompts; divergences not at a tie are held against ``max_load_divergence_rate``. The
  max |delta logprob| is over the chosen tokens' logprobs on the common prefix of the two
  outputs, held against ``logprob_tolerance``.

Verdict: each figure passes or fails against its threshold, or is "not available" (its
reason stated, never a failure); the suite fails when any figure fails.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

import pandas as pd

FigureStatus = Literal["pass", "fail", "not available"]
NOT_AVAILABLE = "not available from this target"
PROMPT_TABLE_FILE = "accuracy_prompts.parquet"  # the per-prompt table, in the run directory

# Written into every accuracy summary, so that the file explains itself.
DEFINITIONS = {
    "top1_agreement": "fraction of the target's greedy output positions (concurrency 1, all "
    "prompts pooled) where the reference's argmax given the same prefix is the target's token",
    "kl": "KL(P_target || P_ref) per position over the target's top-k tokens plus one 'other' "
    "bucket (1 - top-k mass), in nats; a lower bound of the full-vocabulary KL",
    "perplexity": "exp(mean negative logprob of tokens 2..N of the held-out text); "
    "ratio = target / reference",
    "load_divergence_rate": "prompts whose greedy output at the high concurrency differs from "
    "the one at concurrency 1 / prompts",
    "load_max_abs_logprob_delta": "max |logprob(c=high) - logprob(c=1)| of the chosen tokens "
    "over the common prefix of the two outputs, in nats",
    "tie": "a divergence whose first differing tokens were within logprob_tolerance of each "
    "other at concurrency 1",
}


@dataclass(frozen=True, slots=True)
class Figure:
    """One figure against its threshold: ``value`` ``comparison`` ``threshold`` passes."""

    name: str
    value: float | None
    threshold: float
    comparison: str  # ">=", "<=", "within x/1 and x" (a ratio either way)
    status: FigureStatus
    reason: str | None = None  # why it is not available, or what failed


@dataclass(frozen=True, slots=True)
class PromptRow:
    """One prompt of the set: its figures against the reference and under load."""

    prompt_id: str
    prompt_tokens: int
    output_tokens: int  # the target's, at concurrency 1
    agreed_positions: int | None
    top1_agreement: float | None
    first_disagreement: int | None  # 0-based output position; None: none
    mean_kl: float | None
    max_kl: float | None
    max_abs_logprob_diff: float | None  # chosen token, target vs reference
    load_output_tokens: int | None
    load_diverged: bool | None
    load_first_divergence: int | None
    load_divergence_at_tie: bool | None
    load_max_abs_logprob_delta: float | None


@dataclass(frozen=True, slots=True)
class PerplexityFigures:
    """The held-out text under both sides."""

    scored_tokens: int  # N - 1
    reference: float
    target: float | None
    ratio: float | None  # target / reference
    source: str | None  # "echo" or "prompt_logprobs": how the target gave them


@dataclass(frozen=True, slots=True)
class LoadFigures:
    """The prompts at concurrency 1 against the high concurrency."""

    concurrency: int  # the most requests in flight at once (all prompts when fewer)
    prompts: int
    diverged: int
    diverged_at_ties: int
    divergence_rate: float
    first_divergences: tuple[int, ...]  # where each divergence starts, in prompt order
    max_abs_logprob_delta: float | None
    # The target's own counters over the high-concurrency pass (None: it reports none).
    preemptions: int | None = None
    prefix_cache_hit_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class ReferenceSide:
    """What computed the reference figures."""

    model_dir: str
    implementation: str  # "transformers 5.24.0 MixtralForCausalLM"
    dtype: str
    device: str
    threads: int


@dataclass(frozen=True, slots=True)
class AccuracySummary:
    """The summary of an accuracy run: the figures with their verdicts, the per-prompt
    rows, and what both sides were."""

    SUITE: ClassVar[str] = "accuracy"

    verdict: Literal["pass", "fail"]
    figures: tuple[Figure, ...]
    prompts: tuple[PromptRow, ...]
    positions: int  # output positions scored (concurrency 1, all prompts)
    output_tokens: int  # asked per prompt
    top_k: int
    top1_agreement: float | None
    mean_kl: float | None
    max_kl: float | None
    perplexity: PerplexityFigures | None
    load: LoadFigures | None
    reference: ReferenceSide
    target_dtype: str | None  # the dtype the target served in, where known
    unavailable: dict[str, str] = field(default_factory=dict)  # figure -> why
    definitions: dict[str, str] = field(default_factory=lambda: dict(DEFINITIONS))

    def figure(self, name: str) -> Figure | None:
        return next((f for f in self.figures if f.name == name), None)

    @property
    def failed(self) -> tuple[Figure, ...]:
        return tuple(f for f in self.figures if f.status == "fail")


def prompt_frame(rows: Sequence[PromptRow]) -> pd.DataFrame:
    """The per-prompt table, one row per prompt, columns as the record's fields."""
    columns = list(PromptRow.__dataclass_fields__)
    return pd.DataFrame([asdict(r) for r in rows], columns=columns)


def write_prompt_table(directory: Path, rows: Sequence[PromptRow]) -> Path:
    """The per-prompt table as ``accuracy_prompts.parquet`` in the run directory."""
    path = Path(directory) / PROMPT_TABLE_FILE
    tmp = path.with_suffix(".parquet.tmp")
    prompt_frame(rows).to_parquet(tmp, index=False)
    os.replace(tmp, path)
    return path
