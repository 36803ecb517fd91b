"""The reference target from the ``moeperf`` CLI, as real subprocesses on the shipped model.

``moeperf target serve --port 0`` announces where it listens, serves /health, /v1/models
and /metrics, and stops cleanly on SIGTERM and on Ctrl-C (SIGINT); ``moeperf run`` with a
spec of kind reference starts it, drives it and stores a complete run whose target
scrapes are in the reference dialect.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from moeperf.collectors.store import RunStore
from moeperf.targets.ready_line import ReadyChild, start_ready

REPO_ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONIOENCODING": "utf-8"}
READY_TIMEOUT_S = 120


def get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return answer.status, answer.read()


def start_serving(*args: str) -> ReadyChild:
    """``moeperf target serve --port 0 ARGS``, once it announced its URL."""
    command = [sys.executable, "-m", "moeperf.cli", "target", "serve", "--port", "0", *args]
    return start_ready(command, timeout_s=READY_TIMEOUT_S, cwd=REPO_ROOT, env=ENV)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_target_serve_announces_serves_and_stops_on_a_signal(stop_signal):
    child = start_serving("--mtp-tokens", "1", "--served-model-name", "tiny")
    try:
        url = child.url
        assert url.startswith("http://127.0.0.1:")
        assert get(url + "/health")[0] == 200
        status, body = get(url + "/v1/models")
        assert status == 200 and json.loads(body)["data"][0]["id"] == "tiny"
        metrics = get(url + "/metrics")[1].decode()
        assert "reference_steps_total" in metrics
        assert child.stop(stop_signal, timeout_s=30) == 0
    finally:
        child.close()


def test_target_serve_with_a_bad_knob_exits_2_naming_it():
    result = subprocess.run(
        [sys.executable, "-m", "moeperf.cli", "target", "serve", "--mtp-tokens", "-1"],
        cwd=REPO_ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "mtp_tokens" in result.stderr


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_moeperf_run_of_kind_reference_stores_a_complete_run(tmp_path):
    spec = tmp_path / "tiny-reference.toml"
    spec.write_text(
        'name = "tiny-reference"\n'
        '[target]\nkind = "reference"\n'
        "[target.reference]\nmtp_tokens = 1\nmax_running_requests = 4\n"
        '[workload]\nnum_prompts = 16\n[workload.input_tokens]\ndist = "fixed"\nmean = 24\n'
        '[workload.output_tokens]\ndist = "fixed"\nmean = 12\n'
        # 2.5 s of load (was 6 s): the assertions read the records and the target's
        # counters, which need some measured requests and a scrape after the last (measured:
        # 32 requests and 9 scrapes; 44 and 18 at 6 s).
        "[load]\nlevels = [2]\nduration_s = 2.5\nwarmup_s = 0.5\ncooldown_s = 0.5\n"
        # This test checks the records, not the 2-core host's event-loop lag.
        "[harness]\nmax_loop_lag_p99_s = 1.0\nmax_cpu_fraction = 1.0\n"
        "[export]\nlive_metrics = false\nscrape_interval_s = 0.5\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "moeperf.cli", "--runs-dir", str(tmp_path / "runs"), "run",
         str(spec)],
        cwd=REPO_ROOT, env=ENV, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run = RunStore(tmp_path / "runs").open("latest")
    manifest = run.manifest
    assert manifest.status == "complete"
    target = manifest.target
    assert target["kind"] == "reference" and target["config"]["mtp_tokens"] == 1
    # No thread count in the spec: half the usable cores, and the manifest says so.
    cores = len(os.sched_getaffinity(0))
    assert target["config"]["threads"] == max(1, cores // 2)
    assert (
        target["threads_rule"]
        == f"half of the {cores} usable cores, at least 1; the harness shares them"
    )
    assert Path(target["model_dir"]).is_dir() and len(target["recipe_sha256"]) == 64
    # The tokenizer of exact prompt lengths is the model's own.
    assert manifest.spec_resolved["workload"]["tokenizer"] == target["model_dir"]

    requests = run.requests()
    measured = requests[requests["phase"] == "measure"]
    assert len(measured) > 0 and (measured["status"] == "ok").all()
    assert (measured["prompt_tokens"] == 24).all() and (measured["output_tokens"] == 12).all()

    scrapes = [s for s in run.server_metrics() if s.get("available")]
    assert scrapes and {s["dialect"] for s in scrapes} == {"reference"}
    final = {s["name"]: s["run_value"] for s in scrapes[-1]["series"] if not s["labels"]}
    assert final["moeperf_target_generation_tokens"] >= measured["output_tokens"].sum()
    assert final["moeperf_target_spec_decode_draft_tokens"] > 0
    assert final["moeperf_target_finished_requests"] == (requests["status"] == "ok").sum()
