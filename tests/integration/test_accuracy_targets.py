"""The accuracy suite against targets that cannot give what it asks for, through the CLI:
completions without logprobs or token ids (every figure "not available from this
target", the run complete), no /v1/completions at all (exit 2, nothing stored), and a
reference model directory transformers cannot load (exit 2 naming it)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from aiohttp import web
from loopback import serving_in_thread

from moeperf.cli import main
from moeperf.collectors.accuracy_records import NOT_AVAILABLE, AccuracySummary
from moeperf.collectors.store import RunStore
from moeperf.targets.model.checkpoint import default_model_dir

pytest.importorskip("transformers")


async def models(request: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [{"id": "plain", "object": "model"}]})


async def text_only(request: web.Request) -> web.Response:
    body = await request.json()
    if body.get("echo") or body.get("prompt_logprobs") is not None:
        return web.json_response({"error": {"message": "not supported"}}, status=400)
    choice = {"index": 0, "text": " and so on", "logprobs": None, "finish_reason": "length"}
    usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": 3, "total_tokens": 0}
    return web.json_response({"object": "text_completion", "choices": [choice], "usage": usage})


def run_against(url: str, runs: Path, *extra: str) -> int:
    sets = ["target.kind=url", f"target.url={url}", f"reference.model_dir={default_model_dir()}"]
    args = [item for s in [*sets, *extra] for item in ("--set", s)]
    return main(["--runs-dir", str(runs), "run", "accuracy", *args])


def test_a_target_without_logprobs_gets_not_available(tmp_path, capsys):
    with serving_in_thread({"/v1/completions": text_only}, {"/v1/models": models}) as url:
        assert run_against(url, tmp_path) == 0
    reader = RunStore(tmp_path).open("latest")
    summary = reader.summary()
    assert isinstance(summary, AccuracySummary)
    assert reader.manifest.status == "complete" and summary.verdict == "pass"
    assert {f.status for f in summary.figures} == {"not available"}
    assert all(NOT_AVAILABLE in (f.reason or "") for f in summary.figures)
    assert "neither logprobs nor token ids" in summary.unavailable["top1_agreement"]
    assert "echo: HTTP 400" in summary.unavailable["perplexity_ratio"]
    # The reference side still ran: its perplexity of the held-out text is there.
    assert summary.perplexity is not None and summary.perplexity.reference > 1
    assert summary.target_dtype is None
    assert any("not available from this target" in note for note in reader.manifest.notes)
    assert "not available" in capsys.readouterr().out


def test_a_target_without_completions_is_exit_2(tmp_path, capsys):
    with serving_in_thread({}, {"/v1/models": models}) as url:
        assert run_against(url, tmp_path) == 2
    err = capsys.readouterr().err
    assert "has no /v1/completions" in err and "HTTP 404" in err
    assert RunStore(tmp_path).run_ids() == []


def test_a_model_directory_transformers_cannot_load_is_exit_2(tmp_path, capsys):
    broken = tmp_path / "broken-model"
    shutil.copytree(default_model_dir(), broken)
    (broken / "model.safetensors").unlink()
    code = main([
        "--runs-dir", str(tmp_path / "runs"), "run", "accuracy",
        "--set", "target.kind=url", "--set", "target.url=http://127.0.0.1:9",
        "--set", f"reference.model_dir={broken}",
    ])  # fmt: skip
    assert code == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "reference.model_dir: transformers" in err and str(broken) in err
    assert "cannot load the model" in err
    assert not (tmp_path / "runs").exists()
