"""The [sampling] section: its keys, defaults and ranges, and the request fields it sends."""

from __future__ import annotations

import pytest

from moeperf.collectors.request_settings import GREEDY, Sampling
from moeperf.specs import load_spec, validate_spec
from moeperf.suites.errors import SpecError
from moeperf.suites.serving.load.openai_api import rejected_field_hint, request_body


def sampling_of(**fields: object) -> Sampling:
    return validate_spec({"name": "t", "sampling": fields}, "spec.toml").serving.sampling.as_sent()


def test_the_default_is_greedy_and_nothing_else():
    spec = validate_spec({"name": "t"}, "spec.toml").serving
    assert spec.sampling.as_sent() == GREEDY == Sampling(0.0, None, None, None)
    # Every shipped serving spec keeps the default: the committed baselines were greedy.
    assert load_spec("nightly").serving.sampling.as_sent() == GREEDY


def test_a_spec_file_sets_each_key_and_server_default_sends_none(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(
        'name = "s"\n[sampling]\ntemperature = 0.7\ntop_p = 0.9\ntop_k = 20\nseed = 7\n',
        encoding="utf-8",
    )
    assert load_spec(str(path)).serving.sampling.as_sent() == Sampling(0.7, 0.9, 20, 7)
    # TOML has no null: "server-default" is how temperature (default 0.0) is not sent.
    assert sampling_of(temperature="server-default") == Sampling(None, None, None, None)
    assert sampling_of(top_p="server-default", seed="server-default") == GREEDY
    # From the command line, as a bare word.
    loaded = validate_spec({"name": "t"}, "x", ["sampling.temperature=server-default"])
    assert loaded.serving.sampling.temperature is None
    # The resolved spec (what the manifest stores) keeps the None, and validates again.
    dumped = loaded.serving.model_dump(mode="json")
    assert dumped["sampling"] == {"temperature": None, "top_p": None, "top_k": None, "seed": None}
    assert validate_spec(dumped, "resolved").serving.sampling.temperature is None


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("sampling.temperature=2.5", "must be from 0 to 2 (0: greedy), or 'server-default'"),
        ("sampling.temperature=-0.1", "must be from 0 to 2"),
        ("sampling.temperature=hot", "temperature is a number, or 'server-default'"),
        ("sampling.temperature=true", "temperature is a number"),
        ("sampling.top_p=0", "must be above 0 and at most 1"),
        ("sampling.top_p=1.5", "must be above 0 and at most 1"),
        ("sampling.top_k=0", "must be at least 1; leave it out to send none"),
        ("sampling.top_k=-1", "must be at least 1"),
        ("sampling.seed=1.5", "valid integer"),
        ("sampling.seed=99999999999999999999", "must be a 64-bit integer"),
        ("sampling.temprature=0.5", "did you mean 'temperature'? valid fields: temperature"),
    ],
)
def test_out_of_range_values_name_the_flag_and_what_is_valid(override, message):
    with pytest.raises(SpecError) as info:
        validate_spec({"name": "t"}, "spec.toml", [override])
    assert str(info.value).startswith(f"--set {override}:")
    assert message in str(info.value)


def test_the_edges_of_the_ranges_are_valid():
    assert sampling_of(temperature=0, top_p=1, top_k=1) == Sampling(0.0, 1.0, 1, None)
    assert sampling_of(temperature=2.0, seed=0).temperature == 2.0


def test_sampling_in_extra_body_is_sent_to_the_sampling_section():
    # One place for sampling: the manifest records [sampling] as sent and compare checks it.
    with pytest.raises(SpecError) as info:
        validate_spec({"name": "t", "target": {"extra_body": {"top_k": 5}}}, "spec.toml")
    message = str(info.value)
    assert "target.extra_body" in message
    assert "set sampling.top_k (the [sampling] section) instead" in message


def body(sampling: Sampling) -> dict:
    return request_body(
        "chat", "m", "p", 8, continuous_usage=False, ignore_eos=False, sampling=sampling
    )


def test_request_body_sends_greedy_by_default_and_nothing_else():
    sent = request_body("chat", "m", "p", 8, continuous_usage=False, ignore_eos=False)
    assert sent["temperature"] == 0.0
    assert not {"top_p", "top_k", "seed"} & set(sent)


@pytest.mark.parametrize(
    ("sampling", "expected"),
    [
        (Sampling(temperature=None), {}),
        (Sampling(temperature=0.7), {"temperature": 0.7}),
        (Sampling(temperature=None, top_p=0.9), {"top_p": 0.9}),
        (Sampling(top_k=20), {"temperature": 0.0, "top_k": 20}),
        (Sampling(temperature=None, seed=0), {"seed": 0}),  # 0 is a seed, not "unset"
        (Sampling(1.0, 0.5, 3, 42), {"temperature": 1.0, "top_p": 0.5, "top_k": 3, "seed": 42}),
    ],
)
def test_request_body_sends_exactly_the_sampling_fields_that_are_set(sampling, expected):
    sent = body(sampling)
    assert {k: sent[k] for k in ("temperature", "top_p", "top_k", "seed") if k in sent} == expected


@pytest.mark.parametrize(
    ("field", "switch"),
    [
        ("top_k", "remove sampling.top_k"),
        ("top_p", "remove sampling.top_p"),
        ("seed", "remove sampling.seed"),
        ("temperature", 'set sampling.temperature = "server-default"'),
    ],
)
def test_a_rejected_sampling_field_names_its_switch(field, switch):
    sent = body(Sampling(0.5, 0.9, 5, 1))
    error = f"{field} is not supported by this server"
    hint = rejected_field_hint(sent, 400, error)
    assert hint == f"the target rejected {field!r} (HTTP 400); {switch}"
    # Not sent, not blamed.
    assert rejected_field_hint(body(Sampling(None)), 400, error) is None
