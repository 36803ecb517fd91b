"""Starting the embedded reference targets as child processes on 127.0.0.1.

A target runs in its own process so it does not share the harness's event loop or GIL,
as a real server would not. ``EmbeddedTarget`` is the harness's hold on that process: its
pid (the soak's memory watch), and the drills' kill, restart, pause and resume.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from moeperf.suites.errors import TargetError
from moeperf.targets.ready_line import ChildNotReady, ReadyChild, start_ready

_READY_TIMEOUT_S = 30.0
_STDERR_TAIL_CHARS = 500


class EmbeddedTarget:
    """One embedded target's process, which the harness may kill and start again.

    A restart listens on the same port, so the URL the load workers hold stays right.
    """

    def __init__(self, module: str, config: dict[str, Any], ready_timeout_s: float):
        self.module = module
        self.config = config
        self.ready_timeout_s = ready_timeout_s
        self.restarts = 0
        self._paused = False
        self._child = self._start(port=0)
        self.url = self._child.url

    def _start(self, port: int) -> ReadyChild:
        command = [sys.executable, "-m", self.module, "--host", "127.0.0.1", "--port", str(port)]
        command += ["--config", json.dumps(self.config), "--exit-with-parent"]
        try:
            # Its own session: Ctrl-C in the terminal reaches only moeperf, which ends the
            # run and then stops the target, instead of the target dying under requests.
            return start_ready(command, timeout_s=self.ready_timeout_s, new_session=True)
        except ChildNotReady as exc:
            tail = exc.stderr_tail[-_STDERR_TAIL_CHARS:]
            raise TargetError(f"{self.module} did not start ({exc.why}): {tail}") from None

    @property
    def pid(self) -> int:
        return self._child.process.pid

    @property
    def alive(self) -> bool:
        return self._child.process.poll() is None

    def kill(self) -> None:
        """SIGKILL, as the OOM killer or a crashed node would: no shutdown of any kind."""
        self.resume()  # a stopped process dies of SIGKILL too; this keeps the state true
        self._child.process.send_signal(signal.SIGKILL)
        self._child.process.wait()
        self._child.close()

    def restart(self) -> None:
        """Start the target again on its port; returns once it answers its READY line."""
        if self.alive:
            raise TargetError(f"{self.module} (pid {self.pid}) is still running: kill it first")
        port = urlsplit(self.url).port
        assert port is not None
        self._child = self._start(port=port)
        self.restarts += 1

    def pause(self) -> None:
        """SIGSTOP: the process stops answering; the kernel still accepts connections."""
        os.kill(self.pid, signal.SIGSTOP)
        self._paused = True

    def resume(self) -> None:
        if self._paused and self.alive:
            os.kill(self.pid, signal.SIGCONT)
        self._paused = False

    def close(self) -> None:
        self.resume()
        with self._child:
            pass  # ReadyChild's exit stops it (SIGTERM, then SIGKILL) and closes its pipes


@contextmanager
def embedded_target(
    module: str, config: dict[str, Any], ready_timeout_s: float = _READY_TIMEOUT_S
) -> Iterator[EmbeddedTarget]:
    """Run ``python -m module --port 0 --config JSON``; yield its handle; stop it after.

    The child prints ``READY http://127.0.0.1:PORT`` once it listens, and exits by itself
    if this process dies without stopping it (``--exit-with-parent``). A target that loads
    a model needs a longer ``ready_timeout_s``.
    """
    target = EmbeddedTarget(module, config, ready_timeout_s)
    try:
        yield target
    finally:
        target.close()


@contextmanager
def running_target(
    module: str, config: dict[str, Any], ready_timeout_s: float = _READY_TIMEOUT_S
) -> Iterator[str]:
    """``embedded_target`` for callers that need only its base URL."""
    with embedded_target(module, config, ready_timeout_s) as target:
        yield target.url
