"""``moeperf`` as a user runs it: a subprocess of this checkout, its output captured."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONIOENCODING": "utf-8"}


def moeperf(runs: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    """``moeperf --runs-dir RUNS ARGS...``, finished within ``timeout`` seconds."""
    return subprocess.run(
        [sys.executable, "-m", "moeperf.cli", "--runs-dir", str(runs), *args],
        cwd=REPO_ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
