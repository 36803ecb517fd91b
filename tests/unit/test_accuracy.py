"""The accuracy suite's pieces without a target: the figures' arithmetic against hand
computations, the parsing of completions, the verdicts, the spec, the summary file and
the report blocks."""

from __future__ import annotations

import math

import pytest

from moeperf.collectors.accuracy_records import NOT_AVAILABLE, AccuracySummary, ReferenceSide
from moeperf.collectors.summary_json import summary_from_json, summary_to_json
from moeperf.reports.accuracy_blocks import accuracy_blocks
from moeperf.reports.render import table_html
from moeperf.specs import load_spec, validate_spec
from moeperf.suites.accuracy.compare import (
    compare_under_load,
    prompt_figures,
    top_k_kl,
    within_ratio,
)
from moeperf.suites.accuracy.judge import Measured, summarize
from moeperf.suites.accuracy.prompts import Prompt, PromptSet
from moeperf.suites.accuracy.reference_side import ReferencePosition
from moeperf.suites.accuracy.spec import ThresholdsSpec
from moeperf.suites.accuracy.target_side import (
    HeldoutLogprobs,
    Position,
    TargetOutput,
    parse_choice,
)
from moeperf.suites.errors import SpecError

LN = math.log


def ref_at(argmax: int, chosen: float, top: list[float], other: float) -> ReferencePosition:
    return ReferencePosition(argmax, chosen, tuple(top), other)


# -- the figures ---------------------------------------------------------------------------


def test_kl_over_the_top_k_and_an_other_bucket():
    top = [(5, LN(0.6)), (7, LN(0.3))]  # target: 0.6, 0.3 and 0.1 elsewhere
    same = ref_at(5, LN(0.6), [LN(0.6), LN(0.3)], 0.1)
    assert top_k_kl(top, same) == pytest.approx(0.0, abs=1e-15)
    moved = ref_at(5, LN(0.5), [LN(0.5), LN(0.3)], 0.2)  # 0.1 of token 5 went elsewhere
    expected = 0.6 * LN(0.6 / 0.5) + 0.3 * LN(1.0) + 0.1 * LN(0.1 / 0.2)
    assert top_k_kl(top, moved) == pytest.approx(expected, rel=1e-12)
    # Renormalizing over the top-k alone would call this one 0: the other bucket sees it.
    scaled = ref_at(5, LN(0.4), [LN(0.4), LN(0.2)], 0.4)
    assert top_k_kl(top, scaled) > 0.1
    # A top-k reported a rounding above 1 has nothing left for "other".
    full = [(5, LN(0.7)), (7, LN(0.3000001))]
    assert math.isfinite(top_k_kl(full, ref_at(5, LN(0.7), [LN(0.7), LN(0.3)], 0.0)))


def test_agreement_and_logprob_differences_per_position():
    positions = [Position(5, -0.1, ((5, -0.1),)), Position(9, -0.2, ((9, -0.2),))]
    reference = [ref_at(5, -0.1, [-0.1], 0.1), ref_at(8, -0.5, [-0.5], 0.4)]
    figures = prompt_figures(positions, reference)
    assert (figures.agreed, figures.positions, figures.first_disagreement) == (1, 2, 1)
    assert figures.agreement == 0.5
    assert figures.max_abs_logprob_diff == pytest.approx(0.3)
    assert figures.kls is not None and len(figures.kls) == 2
    no_top = prompt_figures([Position(5, None, None)], reference[:1])
    assert no_top.kls is None and no_top.max_abs_logprob_diff is None and no_top.agreed == 1


def output(ids: list[int], lps: list[float], tops=None, prompt_id: str = "p") -> TargetOutput:
    tops = tops or [((t, lp),) for t, lp in zip(ids, lps, strict=True)]
    return TargetOutput(prompt_id, tuple(map(Position, ids, lps, tops)), "length")


def test_under_load_where_a_divergence_starts_and_whether_it_is_a_tie():
    alone = output(
        [1, 2, 3], [-0.1, -0.7, -0.2], [((1, -0.1),), ((2, -0.7), (4, -0.7004)), ((3, -0.2),)]
    )
    same = compare_under_load(alone, output([1, 2, 3], [-0.1, -0.7002, -0.2]), 1e-3)
    assert not same.diverged and same.first_divergence is None
    assert same.max_abs_logprob_delta == pytest.approx(2e-4)
    tie = compare_under_load(alone, output([1, 4, 3], [-0.1, -0.7, -0.2]), 1e-3)
    assert tie.diverged and tie.first_divergence == 1 and tie.at_tie is True
    assert tie.max_abs_logprob_delta == pytest.approx(0.0)  # the common prefix: token 0
    real = compare_under_load(alone, output([1, 2, 9], [-0.1, -0.7, -3.0]), 1e-3)
    assert real.first_divergence == 2 and real.at_tie is False  # 9 was not in the top-k
    assert (
        within_ratio(1.01, 1.02) and within_ratio(1 / 1.01, 1.02) and not within_ratio(1.03, 1.02)
    )


# -- what the target answers -----------------------------------------------------------------


def test_completions_with_token_ids_parse_into_positions():
    choice = {
        "finish_reason": "length",
        "logprobs": {
            "tokens": ["token_id:5", "token_id:7"],
            "token_logprobs": [-0.1, -0.2],
            "top_logprobs": [{"token_id:5": -0.1, "token_id:6": -2.5}, {"token_id:7": -0.2}],
        },
    }
    out = parse_choice("p", choice)
    assert out.token_ids == (5, 7) and out.missing is None
    assert out.positions is not None and out.positions[0].top == ((5, -0.1), (6, -2.5))


def test_completions_without_ids_or_logprobs_say_what_is_missing():
    text_tokens = {"logprobs": {"tokens": ["a", "b"], "token_logprobs": [-1.0, -1.0],
                                "top_logprobs": [{"a": -1.0}, {"b": -1.0}]}}  # fmt: skip
    out = parse_choice("p", text_tokens)
    assert out.positions is None and "return_tokens_as_token_ids" in (out.missing or "")
    bare = parse_choice("p", {"text": "ab", "logprobs": None})
    assert bare.positions is None and "neither logprobs nor token ids" in (bare.missing or "")
    ids_only = parse_choice("p", {"text": "ab", "logprobs": None, "token_ids": [3, 4]})
    assert ids_only.token_ids == (3, 4) and ids_only.positions is not None
    assert ids_only.positions[0].logprob is None and "no logprobs" in (ids_only.missing or "")


# -- verdicts and the summary ------------------------------------------------------------------


def measured(alone: list[TargetOutput], heldout: HeldoutLogprobs) -> Measured:
    prompts = PromptSet(
        tuple(Prompt(o.prompt_id, "x", (1, 2)) for o in alone), "held out", (1, 2, 3), "test"
    )
    # The reference is the target: the same logprob, the rest of the mass elsewhere.
    reference = [
        [
            ref_at(p.token_id, lp, [lp], 1 - math.exp(lp))
            for p in o.positions
            if (lp := p.logprob or -0.1)
        ]
        if o.positions is not None
        else None
        for o in alone
    ]
    return Measured(prompts, alone, alone, 4, reference, heldout, [-1.0, -2.0])


SIDE = ReferenceSide("/models/m", "transformers test", "float32", "cpu", 1)


def summary_of(m: Measured, **thresholds: float) -> AccuracySummary:
    t = ThresholdsSpec(**thresholds)
    return summarize(m, t, output_tokens=2, top_k=1, reference=SIDE, target_dtype="float32")


def test_every_figure_passes_when_the_target_is_the_reference():
    alone = [output([5, 6], [-0.5, -0.25], prompt_id="a"), output([7], [-1.0], prompt_id="b")]
    summary = summary_of(measured(alone, HeldoutLogprobs((-1.0, -2.0), "echo")))
    assert summary.verdict == "pass" and summary.failed == ()
    assert summary.top1_agreement == 1.0 and summary.positions == 3
    assert summary.mean_kl == pytest.approx(0.0, abs=1e-12)
    assert summary.perplexity is not None and summary.perplexity.ratio == pytest.approx(1.0)
    assert summary.perplexity.reference == pytest.approx(math.exp(1.5))
    assert [r.prompt_id for r in summary.prompts] == ["a", "b"]
    # The summary file gives the same record back.
    assert summary_from_json(summary_to_json(summary), "summary.json") == summary


def test_a_target_without_logprobs_gets_not_available_not_failed():
    bare = [TargetOutput("a", None, "length", "its completions carry neither logprobs nor ids")]
    summary = summary_of(measured(bare, HeldoutLogprobs(None, None, "echo: HTTP 400")))
    assert summary.verdict == "pass"
    assert {f.status for f in summary.figures} == {"not available"}
    assert all((f.reason or "").startswith(NOT_AVAILABLE) for f in summary.figures)
    assert "echo: HTTP 400" in summary.unavailable["perplexity_ratio"]


def test_a_failing_figure_fails_the_verdict():
    alone = [output([5, 6], [-0.5, -0.25])]
    m = measured(alone, HeldoutLogprobs((-1.5, -2.5), "prompt_logprobs"))
    summary = summary_of(m, max_perplexity_ratio=1.5)
    ratio = summary.figure("perplexity_ratio")
    assert (
        ratio is not None and ratio.status == "fail" and ratio.value == pytest.approx(math.exp(0.5))
    )
    assert summary.verdict == "fail"
    html = "".join(table_html(t) for t in accuracy_blocks(summary))
    assert "perplexity_ratio" in html and "prompt_logprobs" in html and "within 1/1.5" in html


# -- the spec ----------------------------------------------------------------------------------


def test_the_shipped_spec_and_what_is_refused():
    spec = load_spec("accuracy").accuracy
    assert spec.target.kind == "reference" and spec.thresholds.min_top1_agreement == 0.98
    base = {"suite": "accuracy", "name": "a"}
    with pytest.raises(SpecError, match="serves no model"):
        validate_spec({**base, "target": {"kind": "synthetic"}}, "s.toml")
    with pytest.raises(SpecError, match=r"reference\.model_dir"):
        validate_spec({**base, "target": {"kind": "url", "url": "http://h:1"}}, "s.toml")
    with pytest.raises(SpecError, match="completions"):
        validate_spec(base, "s.toml", ["target.api=chat"])
    with pytest.raises(SpecError, match=r"thresholds.min_top1_agreemnt: unknown field"):
        validate_spec({**base, "thresholds": {"min_top1_agreemnt": 1}}, "s.toml")
    with pytest.raises(SpecError, match="an accuracy spec is needed"):
        _ = validate_spec({"name": "s"}, "s.toml").accuracy
