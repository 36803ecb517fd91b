"""The pre-flight check: the target must answer before any load, and name its model."""

from __future__ import annotations

import json
import socket

import pytest

from moeperf.collectors.errors import MoeperfUsageError
from moeperf.suites.errors import UsageError
from moeperf.suites.serving.preflight import (
    Answer,
    TargetCheck,
    TargetUnreachable,
    check_target,
    http_get,
    served_model,
)

URL = "http://10.0.0.7:8000"
MODELS = b'{"object": "list", "data": [{"id": "qwen"}, {"id": "other"}]}'


def answers(table: dict[str, Answer]):
    seen: list[str] = []

    def get(url: str, _timeout_s: float) -> Answer:
        seen.append(url)
        return table[url]

    return get, seen


def test_the_models_the_target_lists_are_read():
    get, seen = answers({f"{URL}/v1/models": Answer(200, MODELS)})
    check = check_target(URL + "/", get)
    assert check == TargetCheck(("qwen", "other"), f"{URL}/v1/models")
    assert seen == [f"{URL}/v1/models"]


def test_health_answers_when_the_models_endpoint_does_not():
    get, seen = answers(
        {
            f"{URL}/v1/models": Answer(404, problem="HTTP 404 Not Found"),
            f"{URL}/health": Answer(200),
        }
    )
    assert check_target(URL, get) == TargetCheck((), f"{URL}/health")
    assert seen == [f"{URL}/v1/models", f"{URL}/health"]


def test_an_http_error_on_both_endpoints_names_both():
    get, _ = answers(
        {
            f"{URL}/v1/models": Answer(200, b"<html>proxy</html>"),
            f"{URL}/health": Answer(503, problem="HTTP 503 Service Unavailable"),
        }
    )
    with pytest.raises(TargetUnreachable) as refused:
        check_target(URL, get)
    assert str(refused.value) == (
        f"target {URL} does not answer: GET {URL}/v1/models: HTTP 200 but not a model list; "
        f"GET {URL}/health: HTTP 503 Service Unavailable. Start the server or fix target.url; "
        "nothing was sent and no run was stored"
    )


def test_a_timeout_is_named_and_health_is_not_tried_on_a_dead_socket():
    get, seen = answers(
        {
            f"{URL}/v1/models": Answer(
                None, problem="no answer within 5 s (timeout)", unreachable=True
            )
        }
    )
    with pytest.raises(TargetUnreachable, match=r"/v1/models: no answer within 5 s \(timeout\)"):
        check_target(URL, get)
    assert seen == [f"{URL}/v1/models"]


def test_a_refused_connection_is_named_and_is_a_usage_error():
    with socket.socket() as probe:  # a port that was free a moment ago
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    answer = http_get(f"http://127.0.0.1:{port}/v1/models", 1.0)
    assert answer.unreachable and answer.problem is not None
    assert answer.problem.startswith("connection refused")
    with pytest.raises(TargetUnreachable) as refused:
        check_target(f"http://127.0.0.1:{port}")
    assert isinstance(refused.value, MoeperfUsageError)  # exit 2


def test_the_model_is_the_specs_or_the_targets_never_a_placeholder():
    listed = TargetCheck(("qwen",), f"{URL}/v1/models")
    assert served_model("", listed, URL) == "qwen"
    assert served_model("mine", listed, URL) == "mine"
    with pytest.raises(UsageError, match=r"lists no model at /v1/models: set target\.model"):
        served_model("", TargetCheck((), f"{URL}/health"), URL)


def test_the_context_limit_each_model_states_is_read():
    body = json.dumps(
        {
            "data": [
                {"id": "qwen", "max_model_len": 32768},
                {"id": "other"},  # OpenAI itself states none
                {"id": "odd", "max_model_len": "4096"},  # not a number: not believed
            ]
        }
    ).encode()
    check = check_target(URL, answers({f"{URL}/v1/models": Answer(200, body)})[0])
    assert check.models == ("qwen", "other", "odd")
    assert check.context_of("qwen") == 32768
    assert check.context_of("other") is None
    assert check.context_of("odd") is None
