"""A run against a target behind a gateway that wants an API key and headers (real HTTP on
127.0.0.1): every request the harness makes carries them, and no value is ever written.

The gateway is the synthetic target's own app with a guard in front: it answers 401 to a
request without the exact headers, and it is hostile, echoing the credentials it got in
some 400 bodies, so the harness must mask what it stores.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from secret_scan import files_holding

from moeperf.collectors.store import RunStore
from moeperf.suites.serving.load.auth import MissingHeaderValue
from moeperf.suites.serving.preflight import TargetUnauthorized
from moeperf.suites.serving.runner import run_serving
from moeperf.suites.serving.spec import ServingSpec
from moeperf.targets.synthetic.config import SyntheticConfig
from moeperf.targets.synthetic.server import build_app

KEY_VAR, GATEWAY_VAR = "MOEPERF_TEST_API_KEY", "MOEPERF_TEST_GATEWAY_TOKEN"
# So long that the stored message's cut at 500 characters falls inside the echoed key.
_PADDING = "x" * 420
_BEFORE_KEY = f'HTTP 400: {{"error": {{"message": "refused: {_PADDING} Authorization: Bearer '


@dataclass
class Gateway:
    url: str = ""
    # (path, whether it carried every expected header), in arrival order.
    seen: list[tuple[str, bool]] = field(default_factory=list)


@contextmanager
def gateway(expected: dict[str, str]) -> Iterator[Gateway]:
    """The synthetic target behind the guard, on its own thread and event loop."""
    found = Gateway()
    completions = itertools.count()

    @web.middleware
    async def guard(request: web.Request, handler: Any) -> web.StreamResponse:
        allowed = all(request.headers.get(name) == value for name, value in expected.items())
        found.seen.append((request.path, allowed))
        if not allowed:
            return web.json_response({"error": {"message": "unauthorized"}}, status=401)
        if request.path == "/v1/completions" and next(completions) % 3 == 2:
            # A server that echoes what it was sent, the secret across the 500-char cut.
            echo = (
                f"refused: {_PADDING} Authorization: {request.headers['Authorization']}, "
                f"X-Gateway-Token: {request.headers['X-Gateway-Token']}"
            )
            return web.json_response({"error": {"message": echo}}, status=400)
        return await handler(request)

    app = build_app(SyntheticConfig(ttft_s=0.005, itl_s=0.002))
    app.middlewares.append(guard)
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    found.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield found
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def spec(url: str) -> ServingSpec:
    return ServingSpec.model_validate(
        {
            "name": "auth",
            "target": {
                "kind": "url",
                "url": url,
                "api_key_env": KEY_VAR,
                "headers": {"X-Org": FIXED, "X-Gateway-Token": {"env": GATEWAY_VAR}},
            },
            "workload": {
                "input_tokens": {"mean": 8},
                "output_tokens": {"mean": 4},
                "num_prompts": 6,
                "tokenizer": "server",
            },
            "load": {"levels": [1], "max_requests": 9, "warmup_s": 0},
            # This test checks what is sent and stored, not the 2-core host's loop lag.
            "harness": {"max_loop_lag_p99_s": 1.0, "max_cpu_fraction": 1.0},
            "export": {"live_metrics": False, "scrape_interval_s": 0.2},
        }
    )


KEY = f"sk-moeperf-test-{uuid.uuid4().hex}"
GATEWAY_TOKEN = f"gw-{uuid.uuid4().hex}"
FIXED = f"acme-{uuid.uuid4().hex}"
EXPECTED = {"Authorization": f"Bearer {KEY}", "X-Gateway-Token": GATEWAY_TOKEN, "X-Org": FIXED}


def test_the_scan_finds_a_secret_in_plain_and_parquet_files(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "plain.json").write_text(f'{{"note": "{KEY}"}}')
    pq.write_table(pa.table({"error_message": [f"HTTP 401: {KEY}"]}), tmp_path / "t.parquet")
    (tmp_path / "clean.txt").write_text("nothing here")
    assert files_holding(KEY, tmp_path) == ["plain.json", "t.parquet"]


@pytest.mark.timeout(180)
def test_every_request_carries_the_headers_and_no_value_is_stored(tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_VAR, KEY)
    monkeypatch.setenv(GATEWAY_VAR, GATEWAY_TOKEN)
    store = RunStore(tmp_path / "runs")
    with gateway(EXPECTED) as target:
        s = spec(target.url)
        run = store.open(run_serving(s, s.model_dump(mode="json"), store))
    # The pre-flight, the prompt builder's and the workers' /tokenize, the load and the
    # scraper: all of them, and none without the headers.
    paths = {path for path, _ in target.seen}
    assert {"/v1/models", "/tokenize", "/v1/completions", "/metrics"} <= paths
    assert all(allowed for _, allowed in target.seen), target.seen

    assert run.manifest.target["headers"] == {
        "Authorization": f"env {KEY_VAR}",
        "X-Org": "fixed",
        "X-Gateway-Token": f"env {GATEWAY_VAR}",
    }
    requests = run.requests()
    assert (requests["status"] == "ok").sum() == 6
    echoed = requests[requests["http_status"] == 400]["error_message"]
    assert len(echoed) == 3
    assert len(_BEFORE_KEY) < 500 < len(_BEFORE_KEY) + len(KEY)  # the cut is in the key
    for message in echoed:
        assert message.startswith(_BEFORE_KEY + "***, X-Gateway-")
        assert KEY[:12] not in message  # masked before the cut, not after it
    for secret in (KEY, GATEWAY_TOKEN, FIXED):
        assert files_holding(secret, run.directory) == [], secret


@pytest.mark.timeout(60)
def test_an_unset_variable_stops_the_run_before_anything_is_sent(tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_VAR, KEY)
    monkeypatch.delenv(GATEWAY_VAR, raising=False)
    store = RunStore(tmp_path / "runs")
    with gateway(EXPECTED) as target, pytest.raises(MissingHeaderValue) as refused:
        s = spec(target.url)
        run_serving(s, s.model_dump(mode="json"), store)
    assert f"target.headers.X-Gateway-Token reads the environment variable {GATEWAY_VAR}" in str(
        refused.value
    )
    assert target.seen == [] and not (tmp_path / "runs").exists()


@pytest.mark.timeout(60)
def test_a_wrong_key_is_refused_at_the_pre_flight_and_no_run_is_stored(tmp_path, monkeypatch):
    wrong = f"sk-moeperf-wrong-{uuid.uuid4().hex}"
    monkeypatch.setenv(KEY_VAR, wrong)
    monkeypatch.setenv(GATEWAY_VAR, GATEWAY_TOKEN)
    store = RunStore(tmp_path / "runs")
    with gateway(EXPECTED) as target, pytest.raises(TargetUnauthorized) as refused:
        s = spec(target.url)
        run_serving(s, s.model_dump(mode="json"), store)
    message = str(refused.value)
    assert "HTTP 401" in message and "target.api_key_env" in message
    assert wrong not in message
    assert target.seen == [("/v1/models", False)] and not (tmp_path / "runs").exists()
