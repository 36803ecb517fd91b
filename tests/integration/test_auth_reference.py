"""The reference target behind an API key, driven by the ``moeperf`` CLI (real processes on
127.0.0.1): ``moeperf target serve --api-key KEY`` refuses /v1/* without it, a run with
``target.api_key_env`` completes (its probe included), ``moeperf probe --api-key-env``
gets in, and the key appears in no file and no output.

A random key is planted; every command's stdout and stderr, the server's, and every file
written under the test's directory (runs, report, spec) are searched for it and for the
wrong key of a refused run. The search proves first that it can find a planted key.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from secret_scan import files_holding, texts_holding

from moeperf.collectors.store import RunStore
from moeperf.targets.ready_line import start_ready

REPO_ROOT = Path(__file__).resolve().parents[2]
KEY_VAR = "MOEPERF_E2E_API_KEY"
# The server's key from the flag only: MOEPERF_API_KEY of the host must not decide it.
ENV = {
    **{k: v for k, v in os.environ.items() if k not in ("MOEPERF_API_KEY", KEY_VAR)},
    "PYTHONPATH": str(REPO_ROOT),
    "PYTHONIOENCODING": "utf-8",
}
KEY = f"sk-moeperf-test-{uuid.uuid4().hex}"
WRONG = f"sk-moeperf-wrong-{uuid.uuid4().hex}"
# Prompt + output tokens above it are refused with HTTP 400 (the failed run).
MAX_CONTEXT = 256


def ask(url: str, authorization: str | None = None, body: bytes | None = None):
    """(status, body) of one GET (or POST with ``body``), an HTTP error included."""
    request = urllib.request.Request(url, data=body)
    if authorization is not None:
        request.add_header("Authorization", authorization)
    if body is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read()


def write_spec(path: Path, url: str) -> Path:
    path.write_text(
        'name = "auth-e2e"\n'
        f'[target]\nkind = "url"\nurl = "{url}"\napi = "completions"\n'
        f'api_key_env = "{KEY_VAR}"\nheaders = {{ "X-Org" = "acme" }}\n'
        '[workload]\nnum_prompts = 4\ntokenizer = "server"\n'
        '[workload.input_tokens]\ndist = "fixed"\nmean = 16\n'
        '[workload.output_tokens]\ndist = "fixed"\nmean = 8\n'
        "[load]\nlevels = [1]\nmax_requests = 4\nwarmup_s = 0\n"
        # This test checks what is written, not the 2-core host's event-loop lag.
        "[harness]\nmax_loop_lag_p99_s = 1.0\nmax_cpu_fraction = 1.0\n"
        "[export]\nlive_metrics = false\nscrape_interval_s = 0.5\n"
    )
    return path


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_keyed_reference_target_is_driven_and_the_key_is_written_nowhere(tmp_path):
    # The search can fail: it finds a key planted in plain text.
    planted = tmp_path / "planted"
    planted.mkdir()
    (planted / "notes.txt").write_text(f"oops {KEY}")
    assert files_holding(KEY, planted) == ["notes.txt"]
    assert texts_holding(KEY, {"out": f"x{KEY}x", "err": ""}) == ["out"]

    command = [sys.executable, "-m", "moeperf.cli", "target", "serve", "--port", "0"]
    command += ["--api-key", KEY, "--max-context-len", str(MAX_CONTEXT)]
    server = start_ready(command, timeout_s=180, cwd=REPO_ROOT, env=ENV)
    outputs: dict[str, str] = {}
    runs = tmp_path / "runs"

    def moeperf(name: str, *args: str, key: str | None) -> subprocess.CompletedProcess[str]:
        env = ENV if key is None else {**ENV, KEY_VAR: key}
        result = subprocess.run(
            [sys.executable, "-m", "moeperf.cli", "--runs-dir", str(runs), *args],
            cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=240,
        )  # fmt: skip
        outputs[f"{name} stdout"], outputs[f"{name} stderr"] = result.stdout, result.stderr
        return result

    try:
        url = server.url
        # /v1/* wants the key; /health and /metrics stay open, as vLLM's.
        for authorization in (None, f"Bearer {WRONG}", KEY):
            status, body = ask(url + "/v1/models", authorization)
            assert status == 401 and json.loads(body)["error"]["type"] == "authentication_error"
            assert KEY.encode() not in body and WRONG.encode() not in body
        completion = json.dumps({"prompt": "hello", "max_tokens": 2}).encode()
        assert ask(url + "/v1/completions", body=completion)[0] == 401
        status, body = ask(url + "/v1/models", f"Bearer {KEY}")
        assert status == 200 and json.loads(body)["data"]
        assert ask(url + "/health")[0] == 200 and ask(url + "/metrics")[0] == 200

        spec = write_spec(tmp_path / "auth.toml", url)
        done = moeperf("run", "run", str(spec), key=KEY)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        store = RunStore(runs)
        complete = store.open("latest")
        assert complete.manifest.status == "complete"
        assert complete.manifest.target["headers"] == {
            "Authorization": f"env {KEY_VAR}",
            "X-Org": "fixed",
        }
        assert (complete.requests()["status"] == "ok").sum() == 4
        report = moeperf("report", "report", "latest", key=None)
        assert report.returncode == 0, report.stdout[-2000:] + report.stderr[-2000:]
        assert (complete.directory / "report.html").is_file()
        # moeperf probe with the key: it gets in, and its JSON goes under the test's directory.
        probed = tmp_path / "probe.json"
        probe = moeperf(
            "probe", "probe", url, "--api", "completions", "--api-key-env", KEY_VAR,
            "--header", "X-Org=acme", "--json", str(probed), key=KEY,
        )  # fmt: skip
        assert probe.returncode == 0, probe.stdout[-3000:] + probe.stderr[-3000:]
        assert json.loads(probed.read_text(encoding="utf-8"))["tokenize"] is True
        # The section it prints names the variable, so it runs as printed.
        assert f'api_key_env = "{KEY_VAR}"' in probe.stdout
        assert complete.manifest.target["probe"]["metrics"]["dialect"] == "reference"

        # A real failure the target answers: prompt + output beyond its context.
        over = f"workload.output_tokens.mean={MAX_CONTEXT}"
        failed = moeperf("failed run", "run", str(spec), "--set", over, key=KEY)
        assert failed.returncode == 1, failed.stdout[-3000:] + failed.stderr[-3000:]
        requests = store.open("latest").requests()
        assert (requests["http_status"] == 400).all()
        assert requests["error_message"].str.contains("maximum context length").all()

        # The wrong key, and none: refused before a run is stored (exit 2), saying why.
        stored = len(list(runs.iterdir()))
        wrong = moeperf("wrong key", "run", str(spec), key=WRONG)
        assert wrong.returncode == 2 and "HTTP 401" in wrong.stderr + wrong.stdout
        missing = moeperf("no key", "run", str(spec), key=None)
        assert missing.returncode == 2
        assert f"target.api_key_env reads the environment variable {KEY_VAR}" in (
            missing.stderr + missing.stdout
        )
        assert len(list(runs.iterdir())) == stored
    finally:
        assert server.stop(timeout_s=30) == 0
        outputs["server stderr"] = server.stderr_tail(chars=10**6)
        server.close()

    # Runs, report and spec: only the planted file holds the key, nothing the wrong one.
    assert files_holding(KEY, tmp_path) == ["planted/notes.txt"]
    assert files_holding(WRONG, tmp_path) == []
    assert texts_holding(KEY, outputs) == [] and texts_holding(WRONG, outputs) == []
