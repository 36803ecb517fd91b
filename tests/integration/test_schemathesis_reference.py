"""schemathesis against the reference target's published OpenAPI document, over loopback.

The real server (``python -m moeperf.targets.serving``, the shipped model, the real engine) is
started on 127.0.0.1; its /openapi.json is fetched and schemathesis generates requests for
every operation from it: schema-valid ones (positive) and, for the operations with a
body, schema-violating ones (negative). Every answer must be no 5xx, a documented status
with a documented content type and a body matching its schema, and a violating request
must be refused with a 4xx. The server must still answer /health afterwards, and hold no
engine request.

The requests are sent with httpx, not schemathesis' own transport (``case.call``), which
is built on ``requests``: in the test extra, grafana-client brings niquests, whose
urllib3-future installs itself as ``urllib3`` in the same environment, and ``requests``
then fails on every call (``'TrafficPolice' object has no attribute 'keys'``). A case
gives its request as keyword arguments (``as_transport_kwargs``), and
``validate_response`` takes an httpx response, so the checks are schemathesis' own.

Generation is derandomized (the same requests every run) and bounded per operation; the
server's context is 64 tokens, so a chat request without max_tokens ends in well under a
second on a small CPU.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    negative_data_rejection,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from moeperf.targets.ready_line import ReadyChild

pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 120.0  # importing torch and loading the weights on a busy 2-core machine

# Every route the server publishes, with the examples each gets per generation mode.
OPERATIONS = {
    ("POST", "/v1/completions"): 60,
    ("POST", "/v1/chat/completions"): 60,
    ("POST", "/tokenize"): 60,
    ("POST", "/detokenize"): 60,
    ("GET", "/v1/models"): 3,
    ("GET", "/health"): 3,
    ("GET", "/metrics"): 3,
    ("POST", "/reset_prefix_cache"): 3,
}
WITH_BODY = [op for op in OPERATIONS if op[0] == "POST" and op[1] != "/reset_prefix_cache"]


@pytest.fixture(scope="module")
def server(reference_target: Callable[..., ReadyChild]) -> ReadyChild:
    return reference_target({"seed": 0, "max_context_len": 64})


@pytest.fixture(scope="module")
def schema(server: ReadyChild) -> Any:
    document = httpx.get(f"{server.url}/openapi.json", timeout=30).raise_for_status().json()
    return schemathesis.openapi.from_dict(document)


def operation(schema: Any, method: str, path: str) -> Any:
    return next(
        result.ok()
        for result in schema.get_all_operations()
        if (result.ok().method.upper(), result.ok().path) == (method, path)
    )


def send(client: httpx.Client, case: Any, base_url: str) -> httpx.Response:
    """The case's request, as schemathesis would send it, over ``client``."""
    kwargs = dict(case.as_transport_kwargs(base_url=base_url))
    request: dict[str, Any] = {
        "method": kwargs.pop("method"),
        "url": kwargs.pop("url"),
        "headers": kwargs.pop("headers", None),
        "params": kwargs.pop("params", None) or None,
        "cookies": kwargs.pop("cookies", None) or None,
    }
    if "json" in kwargs:
        request["json"] = kwargs.pop("json")
    if "data" in kwargs:
        request["content"] = kwargs.pop("data")
    assert not kwargs, f"request arguments this test does not pass on: {sorted(kwargs)}"
    return client.request(**request)


def fuzz(server: ReadyChild, schema: Any, method: str, path: str, mode: GenerationMode) -> None:
    op = operation(schema, method, path)
    checks = [
        not_a_server_error,
        status_code_conformance,
        content_type_conformance,
        response_schema_conformance,
    ]
    if mode is GenerationMode.NEGATIVE:
        checks.append(negative_data_rejection)
    statuses: list[int] = []

    # No shrinking: a failure is reported with the request that found it (and a curl
    # line to repeat it), and the test's time stays bounded.
    @settings(
        max_examples=OPERATIONS[(method, path)],
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=op.as_strategy(generation_mode=mode))
    def check(case: Any) -> None:
        response = send(client, case, server.url)
        statuses.append(response.status_code)
        case.validate_response(response, checks=checks)

    with httpx.Client(timeout=60) as client:
        check()
        assert statuses, "no request was generated"
        assert client.get(f"{server.url}/health").status_code == 200
    assert server.process.poll() is None, server.stderr_tail()


def test_the_document_publishes_every_route_with_its_body(schema: Any) -> None:
    published = {
        (result.ok().method.upper(), result.ok().path) for result in schema.get_all_operations()
    }
    assert published == set(OPERATIONS)
    for method, path in WITH_BODY:
        assert operation(schema, method, path).body, f"{method} {path} publishes no body"


@pytest.mark.parametrize(("method", "path"), list(OPERATIONS), ids=lambda v: str(v))
def test_schema_valid_requests_get_documented_answers(
    server: ReadyChild, schema: Any, method: str, path: str
) -> None:
    fuzz(server, schema, method, path, GenerationMode.POSITIVE)


@pytest.mark.parametrize(("method", "path"), WITH_BODY, ids=lambda v: str(v))
def test_schema_violating_requests_are_refused_with_a_4xx(
    server: ReadyChild, schema: Any, method: str, path: str
) -> None:
    fuzz(server, schema, method, path, GenerationMode.NEGATIVE)


def test_no_engine_request_is_left_behind(server: ReadyChild) -> None:
    # Runs after the fuzzing (file order): every request it made has ended in the engine.
    deadline = time.monotonic() + 30
    while True:
        text = httpx.get(f"{server.url}/metrics", timeout=30).text
        held = [
            line
            for line in text.splitlines()
            if line.startswith(("reference_requests_running ", "reference_kv_cache_usage_ratio "))
        ]
        if all(float(line.split()[1]) == 0 for line in held) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert len(held) == 2 and all(float(line.split()[1]) == 0 for line in held), held
