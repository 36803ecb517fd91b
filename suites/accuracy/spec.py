"""Accuracy suite specs (``suite = "accuracy"``): which target, which reference, which
prompts, and the thresholds of the verdict.

``[target]`` is the serving suites' ``TargetSpec``, kind "reference" (moeperf starts its
reference target) or "url"; the suite reads ``url``, ``model``, ``reference``,
``ignore_eos``, ``max_tokens_field``, ``extra_body``, ``api_key_env`` and ``headers``, and
always uses /v1/completions (token-id prompts, echo, prompt logprobs). ``[reference]`` is
the model directory Hugging Face transformers loads (default for a reference target: the
directory it serves). Thresholds are in ``[thresholds]`` (docs/guides/accuracy.md:
the definitions).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, model_validator

from moeperf.suites.serving.target_spec import TargetSpec, reference_config
from moeperf.suites.spec_base import NonNegative, Positive, Strict
from moeperf.suites.spec_errors import problems_of, spec_error
from moeperf.suites.spec_files import SPEC_DIR

Fraction = Annotated[float, Field(ge=0, le=1)]
MAX_TOP_K = 20  # vLLM's default max_logprobs, and OpenAI's top_logprobs limit


class ReferenceSpec(Strict):
    """The reference implementation: transformers on the CPU, float32."""

    # A model directory transformers loads; "": the directory a reference target serves
    # (a url target needs one).
    model_dir: str = ""
    # torch threads of the reference side; 0: half the usable cores, at least one (the
    # embedded target's rule: two processes with all cores each oversubscribe them).
    threads: Annotated[int, Field(ge=0)] = 0


class PromptsSpec(Strict):
    """The prompt set and the held-out text: a path as given (absolute, or relative to the
    working directory), else relative to the shipped specs (suites/specs/)."""

    file: str = "accuracy/prompts.jsonl"  # JSON lines: {"id": ..., "text": ...}
    # Plain text whose perplexity is scored on both sides.
    heldout_file: str = "accuracy/heldout.txt"
    output_tokens: Annotated[int, Field(ge=1, le=512)] = 24  # per prompt, greedy
    top_k: Annotated[int, Field(ge=1, le=MAX_TOP_K)] = 5  # logprobs per position
    # Total time one request to the target may take.
    request_timeout_s: Positive = 120.0


class AccuracyLoadSpec(Strict):
    """The under-load check: every prompt again with this many requests in flight."""

    # The most requests in flight at once in the under-load pass.
    concurrency: Annotated[int, Field(ge=2, le=1024)] = 16


class ThresholdsSpec(Strict):
    """What passes. KL and logprobs are in nats."""

    # Top-1 agreement at least this: the fraction of the target's greedy output positions
    # where the reference's argmax is the target's token.
    min_top1_agreement: Fraction = 0.98
    # Mean KL(target || reference) per position at most this (nats), over the target's
    # top-k tokens and the rest.
    max_mean_kl: NonNegative = 1e-3
    # Perplexity ratio target / reference within [1 / max, max].
    max_perplexity_ratio: Annotated[float, Field(ge=1)] = 1.01
    # Divergences under load that do not start at a float-level tie, over the prompts.
    max_load_divergence_rate: Fraction = 0.0
    # Float tolerance of a logprob: under load, and what counts as a tie.
    logprob_tolerance: NonNegative = 1e-3


class AccuracySpec(Strict):
    # The suite that runs this spec.
    suite: Literal["accuracy"] = "accuracy"
    # The spec's name, shown in the report's facts.
    name: str
    # Free text, shown in the report's facts.
    description: str = ""
    # The serving suites' [target]: kind "reference" (the default here) or "url", api
    # "completions".
    target: TargetSpec = TargetSpec(kind="reference")
    # The reference implementation: transformers on the CPU.
    reference: ReferenceSpec = ReferenceSpec()
    # The prompt set and the held-out text.
    prompts: PromptsSpec = PromptsSpec()
    # The under-load pass.
    load: AccuracyLoadSpec = AccuracyLoadSpec()
    # What passes.
    thresholds: ThresholdsSpec = ThresholdsSpec()

    @model_validator(mode="before")
    @classmethod
    def _reference_by_default(cls, data: Any) -> Any:
        # TargetSpec's own default kind is "synthetic", which serves no model: a [target]
        # table without a kind means the reference target here.
        target = data.get("target") if isinstance(data, dict) else None
        if isinstance(target, dict) and "kind" not in target:
            return {**data, "target": {"kind": "reference", **target}}
        return data

    @model_validator(mode="after")
    def _target_fits(self) -> AccuracySpec:
        if self.target.kind == "synthetic":
            raise ValueError(
                "target.kind = 'synthetic' serves no model: the accuracy suite needs "
                "target.kind = 'reference' or 'url'"
            )
        if self.target.api != "completions":
            raise ValueError(
                "target.api: the accuracy suite uses /v1/completions (token-id prompts, "
                "echo, prompt logprobs); set target.api = 'completions'"
            )
        if self.target.kind == "url" and not self.reference.model_dir:
            raise ValueError(
                "reference.model_dir: a url target needs the model directory of the weights "
                "it serves, for transformers to load"
            )
        return self


def validate_accuracy(
    data: dict[str, Any], source: str, overrides: Sequence[str] = ()
) -> AccuracySpec:
    """The spec in ``data`` validated; a ``SpecError`` naming the field (or the ``--set``
    that caused it) otherwise. A reference target's table is checked by the target's own
    config, as in the serving suites."""
    try:
        spec = AccuracySpec.model_validate(data)
    except ValidationError as exc:
        raise spec_error(source, problems_of(exc, AccuracySpec), overrides) from None
    if spec.target.kind == "reference":
        reference_config(spec.target.reference, source, overrides)
    return spec


def spec_file(path: str) -> Path:
    """Where a spec's prompt or held-out file is: as given (absolute, or relative to the
    working directory), else relative to the shipped specs."""
    given = Path(path).expanduser()
    if given.is_absolute() or given.exists():
        return given
    shipped = SPEC_DIR / given
    return shipped if shipped.exists() else given
