"""The headers every request to the target carries (suites/serving/load/auth.py): resolved
from the spec and the environment at run start, never a value in a message or a record."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from moeperf.collectors.errors import MoeperfUsageError
from moeperf.specs import validate_spec
from moeperf.suites.errors import SpecError
from moeperf.suites.serving.load.auth import (
    NO_HEADERS,
    MissingHeaderValue,
    redact,
    request_headers,
    without_header_values,
)
from moeperf.suites.serving.load.plan import WorkerConfig
from moeperf.suites.serving.preflight import Answer, TargetUnauthorized, check_target
from moeperf.suites.serving.target_spec import TargetSpec

KEY = "sk-moeperf-unit-5f0c1d"
GATEWAY = "gw-token-77aa"


def target(**fields) -> TargetSpec:
    data = {"name": "t", "target": {"kind": "url", "url": "http://127.0.0.1:9", **fields}}
    return validate_spec(data, "spec.toml").serving.target


def spec_problem(**fields) -> str:
    with pytest.raises(SpecError) as refused:
        target(**fields)
    return str(refused.value)


def test_fixed_and_environment_headers_in_the_specs_order():
    spec = target(
        api_key_env="API_KEY",
        headers={"X-Org": "acme", "X-Gateway-Token": {"env": "GW_TOKEN"}},
    )
    headers = request_headers(spec, {"API_KEY": KEY, "GW_TOKEN": GATEWAY, "OTHER": "x"})
    assert headers.values == (
        ("Authorization", f"Bearer {KEY}"),
        ("X-Org", "acme"),
        ("X-Gateway-Token", GATEWAY),
    )
    # Only what came from the environment is a secret; the manifest gets origins only.
    assert headers.secrets == (KEY, GATEWAY)
    assert headers.described() == {
        "Authorization": "env API_KEY",
        "X-Org": "fixed",
        "X-Gateway-Token": "env GW_TOKEN",
    }
    assert KEY not in repr(headers) and GATEWAY not in repr(headers)


def test_no_spec_headers_send_nothing():
    assert request_headers(target(), {"API_KEY": KEY}) == NO_HEADERS


def test_an_unset_or_empty_variable_is_a_usage_error_naming_it_and_its_key():
    spec = target(api_key_env="API_KEY", headers={"X-Gw": {"env": "GW_TOKEN"}})
    with pytest.raises(MissingHeaderValue) as refused:
        request_headers(spec, {"API_KEY": "", "UNRELATED": KEY})
    message = str(refused.value)
    assert isinstance(refused.value, MoeperfUsageError)  # exit 2
    assert "target.api_key_env reads the environment variable API_KEY, which is empty" in message
    assert "target.headers.X-Gw reads the environment variable GW_TOKEN, which is not set" in (
        message
    )
    assert "no run was stored" in message and KEY not in message


def test_a_line_break_in_a_variable_is_refused_without_showing_it():
    with pytest.raises(MissingHeaderValue) as refused:
        request_headers(target(api_key_env="API_KEY"), {"API_KEY": KEY + "\r\nX-Evil: 1"})
    assert "API_KEY holds a line break" in str(refused.value)
    assert KEY not in str(refused.value)


@pytest.mark.parametrize("name", ["Authorization", "authorization"])
def test_an_authorization_header_with_api_key_env_is_a_spec_error(name):
    message = spec_problem(api_key_env="API_KEY", headers={name: "Bearer x"})
    assert "target.api_key_env sends the Authorization header" in message
    assert "keep one of them" in message
    # Alone, either one is fine.
    assert target(headers={name: "Bearer x"}).headers == {name: "Bearer x"}


def test_a_key_written_where_its_variables_name_belongs_is_refused_unshown():
    message = spec_problem(api_key_env=KEY)
    assert "target.api_key_env must be the name of an environment variable" in message
    assert KEY not in message
    message = spec_problem(headers={"X-Gw": {"env": GATEWAY}})
    assert "target.headers.X-Gw: env must be the name of an environment variable" in message
    assert GATEWAY not in message


@pytest.mark.parametrize(
    ("headers", "named"),
    [
        ({"X-Gw": {"env": "A", "extra": 1}}, 'a string, or { env = "NAME" }'),
        ({"X-Gw": 3}, 'a string, or { env = "NAME" }'),
        ({"X-Gw": "a\r\nX-Evil: 1"}, "cannot hold a line break"),
        ({"X Gw": "a"}, "'X Gw' is not a header name"),
        ({"Content-Length": "3"}, "the harness sets this header itself"),
        ({"X-Gw": "a", "x-gw": "b"}, "'x-gw' is given twice"),
    ],
)
def test_a_bad_header_names_itself_and_never_repeats_the_value(headers, named):
    message = spec_problem(headers=headers)
    assert named in message and "target.headers" in message
    assert "(got" not in message


def test_redact_masks_every_secret_longest_first():
    text = f"HTTP 401: bad key Bearer {KEY}; also {KEY}x and {GATEWAY}"
    assert (
        redact(text, (KEY[:6], KEY, GATEWAY)) == "HTTP 401: bad key Bearer ***; also ***x and ***"
    )
    assert redact(text, ()) == text
    assert redact(text, ("",)) == text  # an empty secret matches nothing


def test_stored_spec_copies_keep_no_header_value():
    given: dict[str, Any] = {
        "name": "t",
        "target": {"headers": {"X-Org": "acme", "X-Gw": {"env": "GW"}}},
    }
    stored = without_header_values(given)
    assert stored["target"]["headers"] == {"X-Org": "***", "X-Gw": {"env": "GW"}}
    assert given["target"]["headers"]["X-Org"] == "acme"  # the caller's data is left alone
    assert without_header_values({"name": "t"}) == {"name": "t"}


def test_worker_config_carries_the_headers_by_pickle_and_its_repr_shows_none():
    headers = request_headers(target(api_key_env="API_KEY"), {"API_KEY": KEY})
    config = WorkerConfig(
        base_url="http://127.0.0.1:9",
        api="completions",
        model="m",
        prompts=(),
        anchor_ns=0,
        request_timeout_s=1.0,
        stall_timeout_s=1.0,
        continuous_usage=True,
        ignore_eos=True,
        headers=headers,
    )
    assert pickle.loads(pickle.dumps(config)).headers == headers
    assert KEY not in repr(config)


@pytest.mark.parametrize("status", [401, 403])
def test_a_pre_flight_refused_for_credentials_says_how_to_send_them(status):
    seen: list[str] = []

    def get(url: str, _timeout_s: float) -> Answer:
        seen.append(url)
        return Answer(status, problem=f"HTTP {status} Unauthorized")

    with pytest.raises(TargetUnauthorized) as refused:
        check_target("http://127.0.0.1:9", get)
    message = str(refused.value)
    assert f"HTTP {status}" in message and "set target.api_key_env" in message
    assert isinstance(refused.value, MoeperfUsageError)
    # vLLM's /health is open with a key: that it answers would not make the load succeed.
    assert seen == ["http://127.0.0.1:9/v1/models"]
