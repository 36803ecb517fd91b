"""A real run's manifest records exactly what its request bodies asked of the target.

The target is a real HTTP server on 127.0.0.1 that keeps every body it is sent; the run is
the runner's own (worker processes, aiohttp), so the record is checked against the bytes
that crossed the socket, not against the spec.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from moeperf.cli import main
from moeperf.collectors.request_settings import RequestSettings, Sampling
from moeperf.collectors.store import RunReader, RunStore
from moeperf.specs import validate_spec
from moeperf.suites.serving.runner import run_serving

pytestmark = pytest.mark.slow

# The fields request_body builds itself; any other field of a body came from extra_body.
BUILT = {"model", "stream", "stream_options", "max_tokens", "max_completion_tokens"}
BUILT |= {"temperature", "top_p", "top_k", "seed", "ignore_eos", "min_tokens"}
BUILT |= {"messages", "prompt"}
TOKENS = 4
PROMPT = "recorded prompt "


class RecordingTarget:
    """An OpenAI-compatible server in a thread of its own: lists one model, answers every
    chat or completions request with a stream of TOKENS tokens, usage and [DONE], and keeps
    the bodies it was sent."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(ready,), daemon=True)
        self._thread.start()
        assert ready.wait(10), "the recording target did not start"

    def _serve(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_post("/v1/chat/completions", self._generate)
        app.router.add_post("/v1/completions", self._generate)
        self._runner = web.AppRunner(app)
        self._loop.run_until_complete(self._runner.setup())
        self._loop.run_until_complete(web.TCPSite(self._runner, "127.0.0.1", 0).start())
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        ready.set()
        self._loop.run_forever()

    async def _models(self, _request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "recorded"}]})

    async def _metrics(self, _request: web.Request) -> web.Response:
        return web.Response(text="", content_type="text/plain")

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        # The load's prompts only: a pre-flight probe of the target sends its own.
        prompt = body["messages"][0]["content"] if "messages" in body else body["prompt"]
        if prompt.startswith(PROMPT):
            self.bodies.append(body)
        chat = "messages" in body
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for i in range(TOKENS):
            choice: dict[str, Any] = {"index": 0, "finish_reason": None}
            choice.update({"delta": {"content": "t"}} if chat else {"text": "t"})
            if i == TOKENS - 1:
                choice["finish_reason"] = "length"
            await response.write(_event({"id": "x", "choices": [choice]}))
            await asyncio.sleep(0.002)
        usage = {"prompt_tokens": 2, "completion_tokens": TOKENS, "total_tokens": 2 + TOKENS}
        await response.write(_event({"id": "x", "choices": [], "usage": usage}))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    def close(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


def _event(chunk: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(chunk)}\n\n".encode()


@pytest.fixture
def target() -> Iterator[RecordingTarget]:
    server = RecordingTarget()
    try:
        yield server
    finally:
        server.close()


def as_sent(body: dict[str, Any], scrape_interval_s: float | None) -> RequestSettings:
    """The request settings one body shows, read off the body alone."""
    options = body.get("stream_options") or {}
    return RequestSettings(
        api="chat" if "messages" in body else "completions",
        sampling=Sampling(
            body.get("temperature"), body.get("top_p"), body.get("top_k"), body.get("seed")
        ),
        include_usage=options.get("include_usage") is True,
        continuous_usage=options.get("continuous_usage_stats") is True,
        ignore_eos=body.get("ignore_eos") is True,
        min_tokens=body.get("min_tokens"),
        max_tokens_field=next(
            (f for f in ("max_completion_tokens", "max_tokens") if f in body), "max_tokens"
        ),
        extra_body={k: v for k, v in body.items() if k not in BUILT},
        scrape_interval_s=scrape_interval_s,
    )


def run(tmp_path: Path, url: str, **sections: dict[str, Any]) -> RunReader:
    dataset = tmp_path / "prompts.jsonl"
    dataset.write_text(
        "\n".join(json.dumps({"prompt": f"{PROMPT}{i}", "output_tokens": TOKENS}) for i in range(8))
    )
    data: dict[str, Any] = {
        "name": "recorded",
        "workload": {"kind": "dataset", "dataset_path": str(dataset), "tokenizer": "",
                     "num_prompts": 8},
        "load": {"levels": [2], "duration_s": 1.5, "warmup_s": 0.0, "cooldown_s": 0.0,
                 "workers": 1},
        **sections,
    }  # fmt: skip
    data["target"] = {"kind": "url", "url": url, **data.get("target", {})}
    loaded = validate_spec(data, "test")
    store = RunStore(tmp_path / "runs")
    return store.open(run_serving(loaded.serving, loaded.given, store))


def test_the_manifest_has_the_settings_the_bodies_had(tmp_path, target, capsys):
    reader = run(
        tmp_path,
        target.url,
        target={"api": "chat", "continuous_usage": False, "ignore_eos": False,
                "min_tokens": 2, "max_tokens_field": "max_completion_tokens",
                "extra_body": {"min_p": 0.05}},
        sampling={"temperature": 0.7, "top_p": 0.9, "seed": 11},
        export={"live_metrics": False, "scrape_target": False},
    )  # fmt: skip
    recorded = reader.manifest.request_settings
    assert recorded is not None and len(target.bodies) >= 4
    # Every body, field by field (the list of those that differ is shown on failure).
    assert [seen for seen in (as_sent(b, None) for b in target.bodies) if seen != recorded] == []
    # top_k was not set: not sent, recorded as null (the server's default).
    assert recorded.sampling == Sampling(0.7, 0.9, None, 11)
    assert all("top_k" not in body for body in target.bodies)
    # runs show (with --verbose: what every request asked) and the report say so.
    capsys.readouterr()
    assert main(["--runs-dir", str(tmp_path / "runs"), "runs", "show", reader.run_id, "-v"]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "sampling (as sent): temperature=0.7, top_p=0.9, top_k=server default, seed=11" in shown
    assert "ignore_eos=false, min_tokens=2, max_tokens_field=max_completion_tokens" in shown
    page = tmp_path / "report.html"
    report = ["report", reader.run_id, "--out", str(page)]
    assert main(["--runs-dir", str(tmp_path / "runs"), *report]) == 0
    html = page.read_text(encoding="utf-8")
    assert "sampling (as sent)" in html and "top_k=server default" in html


def test_server_default_sends_no_temperature_and_records_it_as_null(tmp_path, target):
    reader = run(
        tmp_path,
        target.url,
        sampling={"temperature": "server-default"},
        export={"live_metrics": False, "scrape_target": True, "scrape_interval_s": 0.5},
    )
    recorded = reader.manifest.request_settings
    assert recorded is not None and target.bodies
    assert recorded.sampling == Sampling(None, None, None, None)
    assert recorded.scrape_interval_s == 0.5
    assert all(not {"temperature", "top_p", "top_k", "seed"} & set(b) for b in target.bodies)
    assert [seen for seen in (as_sent(b, 0.5) for b in target.bodies) if seen != recorded] == []
