"""Hugging Face ``transformers serve`` as a target: the third-party server moeperf is
checked against (tests/e2e/test_transformers_serve.py) and compared with
(``benchmarks/versus.py``).

It is started the way a user would start it, from the ``transformers`` console script of
the running interpreter's environment, on 127.0.0.1 and on CPU, serving a local model
directory with continuous batching and a bounded paged KV cache (``--cb-num-blocks``
blocks of ``--cb-block-size`` tokens). It prints no ready line of its own, so readiness
is its ``GET /health`` answering 200.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

READY_TIMEOUT_S = 180.0
_STOP_TIMEOUT_S = 15.0
_LOG_TAIL_CHARS = 3000


@dataclass(frozen=True)
class TransformersServe:
    """How to start it: the model directory and the continuous-batching cache."""

    model_dir: Path
    cb_block_size: int = 32
    # 64 blocks of 32 tokens: 2,048 tokens of KV cache, 16 requests of 128 + 64 tokens
    # fit with room to spare; a larger cache would only take memory on a small host.
    cb_num_blocks: int = 64
    cb_max_batch_tokens: int = 512
    # torch's intra-op threads (OMP_NUM_THREADS, read by torch at start); None: its default.
    threads: int | None = None


class ServerNotReady(RuntimeError):
    """The server exited or did not answer /health in time; the message has its log tail."""


def executable() -> str:
    """The ``transformers`` console script beside this interpreter (a venv's), else PATH's."""
    beside = Path(sys.executable).parent / "transformers"
    found = str(beside) if beside.exists() else shutil.which("transformers")
    if found is None:
        raise ServerNotReady(
            "no `transformers` command: install transformers[serving] (the test extra pins it)"
        )
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def command(server: TransformersServe, port: int) -> list[str]:
    return [
        executable(),
        "serve",
        str(server.model_dir),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--device",
        "cpu",
        "--continuous-batching",
        "--cb-block-size",
        str(server.cb_block_size),
        "--cb-num-blocks",
        str(server.cb_num_blocks),
        "--cb-max-batch-tokens",
        str(server.cb_max_batch_tokens),
    ]


def _environment(server: TransformersServe) -> dict[str, str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if server.threads is not None:
        env["OMP_NUM_THREADS"] = str(server.threads)
    return env


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@contextmanager
def running(server: TransformersServe, timeout_s: float = READY_TIMEOUT_S) -> Iterator[str]:
    """Start the server, yield its base URL once /health answers, stop it at the end."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace") as log:
        # Its own process group, so that stopping it stops whatever it started too.
        child = subprocess.Popen(
            command(server, port),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=_environment(server),
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + timeout_s
            while not _healthy(url):
                if child.poll() is not None or time.monotonic() > deadline:
                    why = (
                        f"exited with code {child.returncode}"
                        if child.returncode is not None
                        else f"no /health in {timeout_s:.0f} s"
                    )
                    log.seek(0)
                    tail = log.read()[-_LOG_TAIL_CHARS:]
                    raise ServerNotReady(f"transformers serve {why}: {tail}")
                time.sleep(0.5)
            yield url
        finally:
            _stop(child)


def _stop(child: subprocess.Popen[bytes]) -> None:
    if child.poll() is not None:
        return
    os.killpg(child.pid, 15)
    try:
        child.wait(_STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, 9)
        child.wait(_STOP_TIMEOUT_S)
