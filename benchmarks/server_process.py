"""A third-party server as a child process on 127.0.0.1, for the tests and benchmarks that
drive one (``transformers_serve.py``, ``vllm_server.py``), started with the package's own
launcher (moeperf.suites.serving.launched_server: its own process group, its output kept,
SIGTERM then SIGKILL to the group), ready when ``GET /health`` answers 200. The end of its
output is in the error when it exits or does not answer in time.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

from moeperf.suites.serving.launched_server import LaunchedServer, NotReady, free_port

_LOG_TAIL_CHARS = 8000


class ServerNotReady(RuntimeError):
    """The server exited or did not answer /health in time; the message has its log tail."""


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
    server = LaunchedServer(command(port), env=env)
    try:
        try:
            server.wait_until(lambda: True if healthy(url) else None, timeout_s, poll_s=0.5)
        except NotReady as exc:
            why = str(exc) if exc.exit_code is not None else f"no /health in {timeout_s:.0f} s"
            raise ServerNotReady(f"{name} {why}: {server.tail(_LOG_TAIL_CHARS)}") from None
        yield url
    finally:
        server.stop()
