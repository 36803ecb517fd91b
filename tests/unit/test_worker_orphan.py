"""A load worker whose harness is killed outright ends by itself (its parent cannot tell it
to: no exit hook runs on SIGKILL). The watcher of suites/serving/load/worker.py, run in a
real process, forked by a forkserver as the pool starts workers or spawned where there is
none, under a real parent that is then killed with SIGKILL; the whole run is in
tests/e2e/test_harness_killed.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
PARENT = """
import multiprocessing as mp, os, sys, time
from moeperf.suites.serving.load.orphan import exit_when_orphaned as _exit_when_orphaned
if __name__ == "__main__":
    child = mp.get_context(sys.argv[1]).Process(target=_exit_when_orphaned, daemon=True)
    child.start()
    print(child.pid, flush=True)
    time.sleep(300)
"""


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_a_worker_exits_once_its_parent_is_killed(method):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, method],
        cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    child: psutil.Process | None = None
    try:
        assert parent.stdout is not None
        child = psutil.Process(int(parent.stdout.readline()))
        # A forkserver's child is the server's, the server the harness's.
        assert parent.pid in [p.pid for p in child.parents()]
        assert _alive(child), "the watcher must not end a worker whose parent is there"
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=30)
        deadline = time.monotonic() + 20  # it wakes at once; this is slack
        while time.monotonic() < deadline and _alive(child):
            time.sleep(0.05)
        assert not _alive(child), "the worker outlived its killed parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if child is not None and _alive(child):
            child.kill()
