"""A third-party server as a child process on 127.0.0.1, for the tests and benchmarks that
drive one (``transformers_serve.py``, ``vllm_server.py``).

Started in its own process group, so that stopping it stops whatever it started too (vLLM's
engine core and workers); ready when ``GET /health`` answers 200; stopped with SIGTERM, then
SIGKILL. Its output goes to a temporary file whose tail is in the error when it exits or
does not answer in time.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

_STOP_TIMEOUT_S = 20.0
_LOG_TAIL_CHARS = 8000


class ServerNotReady(RuntimeError):
    """The server exited or did not answer /health in time; the message has its log tail."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@contextmanager
def serving(
    name: str,
    command: Callable[[int], list[str]],
    env: Mapping[str, str],
    timeout_s: float,
) -> Iterator[str]:
    """Start ``command(port)``, yield its base URL once /health answers, stop it at the end."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace") as log:
        child = subprocess.Popen(
            command(port), stdout=log, stderr=subprocess.STDOUT, env=dict(env),
            start_new_session=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + timeout_s
            while not healthy(url):
                if child.poll() is not None or time.monotonic() > deadline:
                    why = (
                        f"exited with code {child.returncode}"
                        if child.returncode is not None
                        else f"no /health in {timeout_s:.0f} s"
                    )
                    log.seek(0)
                    tail = log.read()[-_LOG_TAIL_CHARS:]
                    raise ServerNotReady(f"{name} {why}: {tail}")
                time.sleep(0.5)
            yield url
        finally:
            stop(child)


def stop(child: subprocess.Popen[bytes]) -> None:
    if child.poll() is not None:
        return
    os.killpg(child.pid, signal.SIGTERM)
    try:
        child.wait(_STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(_STOP_TIMEOUT_S)
