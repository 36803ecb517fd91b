"""SyntheticConfig validation (its wire switches too), the seeded request plan, and the
synthetic tokenizer."""

from __future__ import annotations

import pytest

from moeperf.targets.openai_wire import WireVariant
from moeperf.targets.synthetic.config import JITTER_KINDS, SyntheticConfig, SyntheticConfigError
from moeperf.targets.synthetic.plan import NS_PER_S, plan_request
from moeperf.targets.synthetic.tokenizer import (
    VOCAB_SIZE,
    count_tokens,
    encode,
    generated_text,
    token_strs,
)


def test_defaults_are_valid_and_round_trip_through_a_dict():
    config = SyntheticConfig()
    assert SyntheticConfig.from_dict(config.to_dict()) == config


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("ttft_s", -0.1, ">= 0"),
        ("itl_s", float("nan"), ">= 0"),
        ("itl_s", float("inf"), ">= 0"),
        ("ttft_s", "0.05", "number"),
        ("ttft_s", True, "number"),
        ("stall_s", -1, ">= 0"),
        ("jitter_scale", -0.5, ">= 0"),
        ("error_rate", 1.5, "[0, 1]"),
        ("stall_rate", -0.1, "[0, 1]"),
        ("malformed_rate", 2, "[0, 1]"),
        ("truncate_rate", -1e-9, "[0, 1]"),
        ("tokens_per_chunk", 0, ">= 1"),
        ("tokens_per_chunk", 1.5, "integer"),
        ("default_output_tokens", 0, ">= 1"),
        ("max_records", 0, ">= 1"),
        ("seed", 1.0, "integer"),
        ("model", "", "non-empty"),
        ("max_concurrent_streams", -1, ">= 0"),
        ("max_concurrent_streams", 2.0, "integer"),
        ("max_concurrent_streams", True, "integer"),
    ],
)
def test_bad_values_name_the_field_and_the_valid_range(field, value, expected):
    with pytest.raises(SyntheticConfigError) as info:
        SyntheticConfig(**{field: value})
    assert field in str(info.value)
    assert expected in str(info.value)
    assert isinstance(info.value, ValueError)


def test_a_stream_limit_round_trips_and_defaults_to_none():
    assert SyntheticConfig().max_concurrent_streams == 0  # no limit: every request at once
    config = SyntheticConfig(max_concurrent_streams=4)
    assert config.to_dict()["max_concurrent_streams"] == 4
    assert SyntheticConfig.from_dict(config.to_dict()) == config


def test_bad_jitter_lists_the_choices():
    with pytest.raises(ValueError, match="jitter must be one of") as info:
        SyntheticConfig(jitter="gaussian")
    for kind in JITTER_KINDS:
        assert kind in str(info.value)


def test_jitter_scale_without_a_jitter_kind_is_rejected():
    with pytest.raises(ValueError, match="jitter_scale"):
        SyntheticConfig(jitter_scale=0.1)


def test_fault_rates_may_not_sum_above_one():
    SyntheticConfig(error_rate=0.5, truncate_rate=0.5)
    with pytest.raises(ValueError, match="at most one fault"):
        SyntheticConfig(error_rate=0.6, stall_rate=0.6)


def test_from_dict_rejects_unknown_fields_and_lists_the_valid_ones():
    with pytest.raises(ValueError, match="'ttft_ms'") as info:
        SyntheticConfig.from_dict({"ttft_ms": 50})
    assert "ttft_s" in str(info.value)
    with pytest.raises(ValueError, match="JSON object"):
        SyntheticConfig.from_dict([1, 2])  # type: ignore[arg-type]  # the error under test


def test_plan_without_jitter_is_exact():
    config = SyntheticConfig(ttft_s=0.05, itl_s=0.01, tokens_per_chunk=3)
    plan = plan_request(config, index=1, output_tokens=10)
    assert plan.chunk_tokens == (3, 3, 3, 1)
    assert plan.due_ns == (50_000_000, 80_000_000, 110_000_000, 120_000_000)
    assert plan.fault is None and plan.fault_chunk is None


@pytest.mark.parametrize("kind", JITTER_KINDS[1:])
def test_jittered_plans_replay_per_seed_and_index(kind):
    config = SyntheticConfig(jitter=kind, jitter_scale=0.2, seed=7)
    plan = plan_request(config, index=3, output_tokens=20)
    assert plan == plan_request(config, index=3, output_tokens=20)
    assert plan != plan_request(config, index=4, output_tokens=20)
    other_seed = SyntheticConfig(jitter=kind, jitter_scale=0.2, seed=8)
    assert plan != plan_request(other_seed, index=3, output_tokens=20)
    gaps = [b - a for a, b in zip(plan.due_ns, plan.due_ns[1:], strict=False)]
    assert all(gap >= 0 for gap in gaps)
    assert len(set(gaps)) > 1  # actually jittered


def test_fault_rates_are_the_fractions_of_requests():
    config = SyntheticConfig(error_rate=0.2, stall_rate=0.1, seed=3)
    faults = [plan_request(config, i, 4).fault for i in range(4000)]
    assert faults.count("error") / 4000 == pytest.approx(0.2, abs=0.03)
    assert faults.count("stall") / 4000 == pytest.approx(0.1, abs=0.03)
    assert faults.count("malformed") == faults.count("truncate") == 0


def test_stall_delays_the_chunks_after_half_of_the_tokens():
    config = SyntheticConfig(ttft_s=0.0, itl_s=0.01, stall_rate=1.0, stall_s=0.5)
    plan = plan_request(config, index=1, output_tokens=10)
    assert plan.fault == "stall" and plan.fault_chunk == 5
    gaps = [b - a for a, b in zip(plan.due_ns, plan.due_ns[1:], strict=False)]
    assert gaps[plan.fault_chunk - 1] == round(0.51 * NS_PER_S)
    assert sum(gaps) == round((9 * 0.01 + 0.5) * NS_PER_S)


def test_single_token_requests_still_get_their_fault():
    config = SyntheticConfig(truncate_rate=1.0)
    assert plan_request(config, index=1, output_tokens=1).fault_chunk == 0


@pytest.mark.parametrize("n_tokens", [1, 2, 17, 999, 1000, 2500])
def test_generated_text_recounts_to_its_token_count(n_tokens):
    text = generated_text(n_tokens)
    assert count_tokens(text) == n_tokens
    assert len(encode(text)) == n_tokens
    # Chunks concatenate to the same text as the whole.
    assert generated_text(3) + generated_text(4, start=3) == generated_text(7)


def test_encode_is_stable_and_in_vocabulary():
    ids = encode("the quick  brown\tfox the")
    assert ids == encode("the quick brown fox the")
    assert ids[0] == ids[-1]
    assert all(0 <= i < VOCAB_SIZE for i in ids)
    # zlib.crc32(b"the") == 1011183078: a fixed id, not a per-process salted hash.
    assert ids[0] == 1011183078 % VOCAB_SIZE
    assert token_strs(" a  b ") == ["a", "b"]
    assert count_tokens("") == 0


# --- the wire switches (targets.openai_wire.WireVariant) ---------------------------------


def test_wire_switches_default_to_vllms_stream_and_round_trip():
    assert SyntheticConfig().wire_variant() == WireVariant()
    config = SyntheticConfig(
        send_done=False, usage="end_only", role_chunk=False, reject_unknown_fields=True
    )
    assert SyntheticConfig.from_dict(config.to_dict()) == config
    assert config.wire_variant() == WireVariant(
        send_done=False, usage="end_only", role_chunk=False, reject_unknown_fields=True
    )


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("send_done", "false", "send_done must be true or false; got 'false'"),
        ("role_chunk", 1, "role_chunk must be true or false; got 1"),
        ("reject_unknown_fields", None, "reject_unknown_fields must be true or false"),
        ("usage", "last", "usage must be one of as_requested, end_only, never; got 'last'"),
        ("usage", True, "usage must be one of as_requested, end_only, never"),
    ],
)
def test_bad_wire_switches_name_the_field_and_what_is_valid(field, value, expected):
    with pytest.raises(SyntheticConfigError) as info:
        SyntheticConfig.from_dict({field: value})
    assert str(info.value) == expected or str(info.value).startswith(expected)
    assert info.value.fields == (field,)


def test_wire_switches_change_no_seeded_draw():
    # Fault counts of existing runs depend on the per-request draws staying the same.
    base = SyntheticConfig(error_rate=0.2, stall_rate=0.2, jitter="uniform", jitter_scale=0.3)
    varied = SyntheticConfig(
        **{**base.to_dict(), "send_done": False, "usage": "never", "role_chunk": False}
    )
    for index in range(1, 50):
        assert plan_request(varied, index, 17) == plan_request(base, index, 17)
