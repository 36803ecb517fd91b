"""The MTP A/B suite's pieces: its spec's rules, the interleaved block order, the
crossover, and the greedy output comparison."""

import re

import pytest

from moeperf.collectors.mtp_ab_records import MtpAbEffect
from moeperf.collectors.mtp_ab_summary import crossover
from moeperf.specs import load_spec
from moeperf.suites.errors import SpecError
from moeperf.suites.serving.mode_spec import MtpAbSpec
from moeperf.suites.serving.mtp_ab.arms import order, schedule
from moeperf.suites.serving.mtp_ab.equality import ArmOutput, compare


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("mtp_ab.drafts=[1, 2]", "must start with 0"),
        ("mtp_ab.drafts=[0, 2, 2]", "lists a draft count twice"),
        ("mtp_ab.urls=['http://a', 'http://b', 'http://c']", "starts one target per arm"),
        ("target.reference.mtp_tokens=2", "remove it (list the draft counts in mtp_ab.drafts)"),
        ("load.mode='poisson'", "load.mode = 'concurrency'"),
        ("load.repeats=2", "remove load.repeats"),
        ("target.kind='synthetic'", "needs target.kind = 'reference' or 'url'"),
    ],
)
def test_the_spec_names_what_is_wrong(override, message):
    with pytest.raises(SpecError, match=re.escape(message)):
        load_spec("mtp-ab", [override])


def test_a_url_target_needs_a_server_or_a_hook_per_arm():
    url = ["target.kind='url'", "target.url='http://127.0.0.1:9'"]
    with pytest.raises(SpecError, match=re.escape("needs mtp_ab.urls")):
        load_spec("mtp-ab", url)
    with pytest.raises(SpecError, match="one entry per arm"):
        load_spec("mtp-ab", [*url, "mtp_ab.hooks=['./off.sh']"])
    spec = load_spec("mtp-ab", [*url, "mtp_ab.hooks=['a', 'b', 'c']"]).serving
    assert spec.mtp_ab is not None and spec.mtp_ab.hooks == ["a", "b", "c"]


def test_blocks_interleave_forward_then_reversed():
    assert order([0, 1, 2], 1) == [0, 1, 2] and order([0, 1, 2], 2) == [2, 1, 0]
    blocks = schedule(MtpAbSpec(drafts=[0, 2], blocks=3), "greedy", [1, 4])
    assert [(b.streams, b.round, b.drafts) for b in blocks] == [
        (1, 1, 0), (1, 1, 2), (1, 2, 2), (1, 2, 0), (1, 3, 0), (1, 3, 2),
        (4, 1, 0), (4, 1, 2), (4, 2, 2), (4, 2, 0), (4, 3, 0), (4, 3, 2),
    ]  # fmt: skip
    assert blocks[2].scenario == "k=2 greedy c=1 #2" and blocks[0].scenario.startswith("MTP off")


def effect(streams, verdict, drafts=2):
    return MtpAbEffect(drafts, "greedy", streams, "tpot_s p50", 0.9, 0.8, 1.1, verdict)


def test_the_crossover_is_the_first_level_where_no_arm_pays_after_one_did():
    found = crossover(
        [effect(1, "better"), effect(4, "better", 1), effect(4, "no difference"),
         effect(16, "no difference"), effect(32, "worse")],
        "greedy",
    )  # fmt: skip
    assert found.pays_at == (1, 4) and found.stops_at == 16
    assert found.text == "MTP stops paying at c=16 (it paid at c=4)"
    every = crossover([effect(1, "better"), effect(4, "better")], "greedy")
    assert every.stops_at is None and every.text == "MTP pays at every level from c=1"
    never = crossover([effect(1, "worse"), effect(4, "no difference")], "greedy")
    assert never.pays_at == () and "pays at no level" in never.text
    late = crossover([effect(1, "no difference"), effect(4, "better")], "greedy")
    assert late.stops_at is None and late.text == "MTP pays at every level from c=4 (not at c=1)"


def test_outputs_are_compared_token_by_token_naming_the_first_difference():
    off = [ArmOutput(("a", "b", "c"), "abc"), ArmOutput(("x", "y"), "xy")]
    same = [ArmOutput(("a", "b", "c"), "abc"), ArmOutput(("x", "y"), "xy")]
    other = [ArmOutput(("a", "b", "c"), "abc"), ArmOutput(("x", "z"), "xz")]
    result = compare({0: off, 1: same, 2: other}, streams=4, output_tokens=3)
    assert result.arms == (1, 2) and result.position_unit == "token"
    assert [
        (m.prompt, m.drafts, m.position, m.off_token, m.arm_token) for m in result.mismatches
    ] == [(1, 2, 1, "y", "z")]
    assert result.passed is False
    assert compare({0: off, 1: same}, 4, 3).passed is True


def test_a_shorter_output_differs_where_it_ends_and_text_is_the_fallback():
    off = [ArmOutput(("a", "b"), "ab")]
    shorter = [ArmOutput(("a",), "a")]
    (mismatch,) = compare({0: off, 1: shorter}, 1, 2).mismatches
    assert (mismatch.position, mismatch.off_token, mismatch.arm_token) == (1, "b", None)
    # No logprobs from the target: the text, by character.
    untokenized = compare({0: [ArmOutput(None, "abc")], 1: [ArmOutput(None, "abd")]}, 1, 3)
    assert untokenized.position_unit == "character"
    assert [(m.position, m.off_token, m.arm_token) for m in untokenized.mismatches] == [
        (2, "c", "d")
    ]
