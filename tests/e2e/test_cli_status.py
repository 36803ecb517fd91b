"""``moeperf run`` end to end when the target is not well: a target that does not answer
exits 2 before anything is stored; a run whose levels failed or were client-bound exits 1,
or 0 with --warn-only, which says so (the rule: docs/concepts/run-status.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from moeperf.collectors.store import RunStore

REPO_ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONIOENCODING": "utf-8"}
SHORT_RUN = [
    "--set", "load.levels=[2]", "--set", "load.duration_s=2",
    "--set", "load.warmup_s=0.5", "--set", "load.cooldown_s=0.2",
]  # fmt: skip


def moeperf(runs_dir: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "moeperf.cli", "--runs-dir", str(runs_dir), *args],
        cwd=REPO_ROOT, env=ENV, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def flat(text: str) -> str:
    """Output with rich's line wrapping undone."""
    return " ".join(text.split())


def test_an_unreachable_target_exits_2_naming_it_before_any_load(tmp_path, unused_tcp_port):
    runs = tmp_path / "runs"
    url = f"http://127.0.0.1:{unused_tcp_port}"
    result = moeperf(
        runs, "run", "synthetic", *SHORT_RUN,
        "--set", "target.kind=url", "--set", f"target.url={url}",
        "--set", "workload.tokenizer=targets/model/default",
    )  # fmt: skip
    assert result.returncode == 2, result.stdout + result.stderr
    err = flat(result.stderr)
    assert f"target {url} does not answer: GET {url}/v1/models: connection refused" in err
    assert "Traceback" not in result.stderr
    assert not runs.exists(), "no run may be stored for a target that does not answer"


ALL_FAIL = ["--set", "target.synthetic.error_rate=1.0"]
# No worker's event loop lags less than a nanosecond: every level is client-bound.
CLIENT_BOUND = ["--set", "harness.max_loop_lag_p99_s=1e-9"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("overrides", "warn_only", "status", "code"),
    [
        (ALL_FAIL, False, "failed", 1),
        (ALL_FAIL, True, "failed", 0),
        (CLIENT_BOUND, True, "invalid", 0),
    ],
    ids=["all-failed", "all-failed-warn-only", "client-bound-warn-only"],
)
def test_a_run_with_levels_not_ok_exits_1_unless_warn_only(
    tmp_path, overrides, warn_only, status, code
):
    runs = tmp_path / "runs"
    flags = ["--warn-only"] if warn_only else []
    # A 1 s level (SHORT_RUN's is 2 s), 0.6 s of it measured: "failed" needs measured
    # requests that all fail (the target's 5xx is instant: 483-555 measured, 755-773 at
    # 2 s); "invalid" reads the loop's lag, over 1e-9 s in any level (2 measured, 4 at 2 s).
    short = [*SHORT_RUN, "--set", "load.duration_s=1", "--set", "load.warmup_s=0.2"]
    result = moeperf(runs, "run", "synthetic", *short, *overrides, *flags, timeout=120)
    out = flat(result.stdout)
    assert result.returncode == code, result.stdout + result.stderr
    manifest = RunStore(runs).open("latest").manifest
    assert manifest.status == status
    assert f"status: {status}" in out
    if status == "failed":
        # Said as the level ends: why it failed, its error types and counts.
        assert "c=2: failed: http_5xx" in out
        assert "levels failed: c=2 (http_5xx" in (manifest.status_reason or "")
    else:
        assert "c=2: client bottleneck: worker 0: event-loop lag" in out
    warned = [note for note in manifest.notes if note.startswith("--warn-only")]
    assert bool(warned) == warn_only
    assert ("exit code 0 because of --warn-only" in out) == warn_only


@pytest.mark.timing
@pytest.mark.slow
def test_promote_refuses_a_run_that_just_failed_the_gate(tmp_path):
    # Issue 11, item 5: promote accepted, as a new version, a run that had just failed the gate.
    runs, baselines = tmp_path / "runs", ["--baselines-dir", str(tmp_path / "baselines")]
    short = [*SHORT_RUN, "--set", "load.levels=[4]", "--set", "load.duration_s=4"]
    assert moeperf(runs, "run", "synthetic", *short, timeout=120).returncode == 0
    promoted = moeperf(runs, "baseline", "promote", "latest", "--name", "b", *baselines)
    assert promoted.returncode == 0, promoted.stderr
    slower = ["--set", "target.synthetic.itl_s=0.013"]  # +30% per token
    assert moeperf(runs, "run", "synthetic", *short, *slower, timeout=120).returncode == 0
    gate = moeperf(runs, "gate", "latest", "--baseline", "b", *baselines, timeout=120)
    assert gate.returncode == 1, gate.stdout + gate.stderr
    refused = moeperf(runs, "baseline", "promote", "latest", "--name", "b", *baselines)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    err = flat(refused.stderr)
    assert "is not promoted: it failed the gate against b (gate.json: exit 1" in err
    assert "--force" in err
    forced = moeperf(runs, "baseline", "promote", "latest", "--name", "b", "--force", *baselines)
    assert forced.returncode == 0, forced.stderr
    assert "promoted with --force although it failed the gate" in flat(forced.stdout)
