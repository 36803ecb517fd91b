"""``moeperf probe`` and the probe a url run starts with, against real servers over loopback.

Three kinds of server: a loopback aiohttp server that answers as a third-party server
does, from its recorded streams (tests/data/streams/: transformers serve 5.24.0, which
refuses ``ignore_eos`` and ``min_tokens`` with 422 as the real one does, and vLLM with
continuous usage); the synthetic target; and a server that answers garbage. The real
transformers serve and reference target are probed in tests/e2e.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web
from loopback import serving_in_thread

from moeperf.cli import main
from moeperf.collectors.store import RunStore
from moeperf.suites.serving.embedded.process import running_target
from moeperf.suites.serving.probe.adapt import adapt_target
from moeperf.suites.serving.probe.present import target_toml
from moeperf.suites.serving.probe.probe import ProbeFailed, probe_target
from moeperf.suites.serving.probe.result import ProbeResult
from moeperf.suites.serving.target_spec import TargetSpec

REPO_ROOT = Path(__file__).resolve().parents[2]
STREAMS = REPO_ROOT / "tests" / "data" / "streams"
MODEL_DIR = REPO_ROOT / "targets" / "model" / "default"


@dataclass
class Imitation:
    """A server that answers every completion request with one recorded stream."""

    fixture: str
    strict: bool  # 422 to ignore_eos and min_tokens, as transformers serve
    bodies: list[dict] = field(default_factory=list)

    async def complete(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(body)
        unexpected = {"ignore_eos", "min_tokens"} & set(body)
        if self.strict and unexpected:
            detail = f"Unexpected fields in the request: {unexpected}"
            return web.json_response({"detail": detail}, status=422)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write((STREAMS / f"{self.fixture}.sse").read_bytes())
        return response

    async def models(self, _request: web.Request) -> web.StreamResponse:
        return web.json_response({"object": "list", "data": [{"id": "imitated"}]})


@pytest.fixture
def imitation(request: pytest.FixtureRequest) -> Iterator[tuple[str, Imitation]]:
    fixture, strict = request.param
    server = Imitation(fixture, strict)
    posts = {"/v1/chat/completions": server.complete}
    with serving_in_thread(posts, {"/v1/models": server.models}) as url:
        yield url, server


TRANSFORMERS = ("transformers_serve_chat", True)
VLLM = ("vllm_chat_continuous_usage", False)


@pytest.mark.parametrize("imitation", [TRANSFORMERS], indirect=True)
async def test_the_probe_finds_how_transformers_serve_streams(imitation):
    url, _server = imitation
    result = await probe_target(url, "chat", "imitated", ("imitated",))
    assert result.sends_done is False
    assert result.role_first_chunk is True
    assert result.usage_unasked is True
    assert result.usage_placement == "finish_chunk"
    assert result.continuous_usage == "ignored"
    assert result.tokens_per_chunk_max is None  # no exact per-chunk counts from it
    assert result.rejected_fields == ("ignore_eos", "min_tokens")
    assert "Unexpected fields" in next(f for f in result.fields if f.field == "ignore_eos").detail
    assert (result.tokenize, result.detokenize) == (False, False)
    assert (result.metrics.available, result.metrics.detail) == (False, "HTTP 404")
    assert result.prefix_cache_reset is None
    assert ProbeResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result


@pytest.mark.parametrize("imitation", [VLLM], indirect=True)
async def test_the_probe_sees_multi_token_chunks_in_continuous_usage(imitation):
    url, _server = imitation
    result = await probe_target(url, "chat", "imitated")
    assert result.sends_done is True
    assert result.continuous_usage == "honoured"
    assert result.usage_placement == "every_chunk"
    # The stream captured from vLLM 0.32.0 has a 2-token chunk (an accepted n-gram draft).
    assert (result.tokens_per_chunk_max, result.tokens_per_chunk_source) == (2, "usage")
    assert result.multi_token_chunks
    assert result.rejected_fields == ()


async def test_the_probe_of_the_synthetic_target():
    with running_target("moeperf.targets.synthetic", {"ttft_s": 0.001, "itl_s": 0.001}) as url:
        result = await probe_target(url, "chat", "synthetic")
    assert result.sends_done is True
    assert result.metrics.available and result.metrics.dialect == "synthetic"
    assert result.tokenize is True
    assert result.support("ignore_eos") == "accepted"


def test_the_fitting_target_section_is_a_valid_spec_and_adapting_turns_off_refused_fields():
    result = _transformers_like_result()
    section = tomllib.loads(target_toml(result))
    target = TargetSpec(**section["target"])
    assert (target.ignore_eos, target.continuous_usage, target.include_usage) == (
        False,
        False,
        True,
    )
    assert target.api_key_env == ""  # no key given: none named
    keyed = TargetSpec(**tomllib.loads(target_toml(result, "VLLM_KEY"))["target"])
    assert keyed.api_key_env == "VLLM_KEY"
    adapted = adapt_target(TargetSpec(kind="url", url=result.url, min_tokens=4), result)
    assert adapted.target.ignore_eos is False and adapted.target.min_tokens is None
    assert adapted.target.include_usage is True  # stream_options was accepted
    assert [n.split(" (")[0] for n in adapted.notes] == [
        "The probe found the target refuses ignore_eos",
        "The probe found the target refuses min_tokens",
    ]
    # Nothing refused: nothing changed, nothing said.
    same = adapt_target(TargetSpec(kind="url", url=result.url, ignore_eos=False), result)
    assert same.notes == () and same.target.ignore_eos is False


def _transformers_like_result() -> ProbeResult:
    import asyncio

    server = Imitation(*TRANSFORMERS)
    posts = {"/v1/chat/completions": server.complete}
    with serving_in_thread(posts, {"/v1/models": server.models}) as url:
        return asyncio.run(probe_target(url, "chat", "imitated"))


@pytest.mark.parametrize("imitation", [TRANSFORMERS], indirect=True)
def test_a_url_run_never_sends_a_field_its_probe_found_refused(imitation, tmp_path):
    url, server = imitation
    code = main([
        "--runs-dir", str(tmp_path), "run", "synthetic",
        "--set", "target.kind=url", "--set", f"target.url={url}",
        "--set", "target.api=chat", "--set", f"workload.tokenizer={MODEL_DIR}",
        "--set", "load.levels=[1,2]", "--set", "load.max_requests=4",
        "--set", "load.warmup_s=0", "--set", "load.duration_s=30",
        # The client's own timing on a busy host is not this test's subject.
        "--set", "harness.max_loop_lag_p99_s=1.0", "--set", "harness.max_cpu_fraction=1.0",
    ])  # fmt: skip
    reader = RunStore(tmp_path).open("latest")
    frame = reader.requests()
    assert code == 0, frame["error_message"].dropna().tolist()
    assert (frame["status"] == "ok").all() and len(frame) == 8
    probed = [b for b in server.bodies if b.get("max_tokens") == 8 and "ignore_eos" in b]
    assert len(probed) == 1  # the probe asked once; no load request carried it
    load = server.bodies[-8:]
    assert not any("ignore_eos" in b or "min_tokens" in b for b in load)
    manifest = reader.manifest
    assert manifest.target["probe"]["sends_done"] is False
    assert manifest.spec_resolved["target"]["ignore_eos"] is False
    refused = "The probe found the target refuses ignore_eos"
    assert any(n.startswith(refused) for n in manifest.notes)


class Garbage:
    def __init__(self) -> None:
        self.completions = 0

    async def complete(self, _request: web.Request) -> web.StreamResponse:
        self.completions += 1
        return web.Response(text="<html>welcome to the gateway</html>", content_type="text/html")

    async def models(self, _request: web.Request) -> web.StreamResponse:
        return web.json_response({"data": [{"id": "m"}]})


def test_a_target_answering_garbage_is_refused_before_any_load(tmp_path, capsys):
    server = Garbage()
    gets = {"/v1/models": server.models}
    with serving_in_thread({"/v1/chat/completions": server.complete}, gets) as url:
        with pytest.raises(ProbeFailed, match="not a stream"):
            import asyncio

            asyncio.run(probe_target(url, "chat", "m"))
        code = main([
            "--runs-dir", str(tmp_path / "runs"), "run", "synthetic",
            "--set", "target.kind=url", "--set", f"target.url={url}",
            "--set", "target.api=chat", "--set", f"workload.tokenizer={MODEL_DIR}",
        ])  # fmt: skip
    assert code == 2
    err = " ".join(capsys.readouterr().err.split())  # rich wraps long lines
    assert "failed the probe" in err and "Content-Type 'text/html" in err
    assert "welcome to the gateway" in err
    assert "Nothing was sent at load and no run was stored" in err
    assert RunStore(tmp_path / "runs").list() == []
    # The probe's first request, and the run's probe first request: nothing more.
    assert server.completions == 2


@pytest.mark.parametrize("imitation", [TRANSFORMERS], indirect=True)
def test_moeperf_probe_prints_the_table_and_the_section_and_writes_json(
    imitation, tmp_path, capsys
):
    url, _server = imitation
    out = tmp_path / "probe.json"
    assert main(["probe", url, "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "sends data: [DONE]" in printed and "rejected (HTTP 422" in printed
    assert "ignore_eos = false  # rejected" in printed
    assert ProbeResult.from_dict(json.loads(out.read_text())).sends_done is False


def test_moeperf_probe_of_nothing_listening_exits_2(unused_tcp_port, capsys):
    assert main(["probe", f"http://127.0.0.1:{unused_tcp_port}"]) == 2
    assert "connection refused" in capsys.readouterr().err
