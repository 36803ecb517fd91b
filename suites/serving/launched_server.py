"""A server moeperf starts as a child process on this host: a deployment sweep's arm
(``deploy_sweep/command.py``), and the third-party servers the tests and benchmarks drive
(benchmarks/server_process.py: ``transformers serve``, vLLM).

It runs in a session of its own, so that its process group holds whatever it starts (vLLM's
engine core and workers), with its output in a temporary file: the end of it, with given
secret values masked, is the reason of a start that fails. ``wait_until`` polls a readiness
probe until it answers; ``stop`` sends SIGTERM to the whole group, waits for the server and
the group, SIGKILLs what is left after the grace, and reaps it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from typing import IO, TypeVar

STOP_GRACE_S = 20.0
_REAPED_S = 5.0
MASK = "***"

T = TypeVar("T")


class NotReady(Exception):
    """The server exited (``exit_code``) or did not answer within the time given (None)."""

    def __init__(self, message: str, exit_code: int | None):
        super().__init__(message)
        self.exit_code = exit_code


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now, for a server to be started on."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def masked(text: str, secrets: Sequence[str]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, MASK)
    return text


def group_alive(pgid: int) -> bool:
    """Whether any process of group ``pgid`` is left (a zombie not yet reaped counts)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class LaunchedServer:
    """``argv`` started (an ``OSError`` if it cannot be), its output kept, until ``stop``."""

    def __init__(
        self,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        secrets: Sequence[str] = (),
    ):
        self._secrets = tuple(secrets)
        # Kept past the start: the reason of a start that fails is the end of it.
        self._log: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115
        try:
            self.process = subprocess.Popen(
                list(argv), stdin=subprocess.DEVNULL, stdout=self._log,
                stderr=subprocess.STDOUT, env=None if env is None else dict(env),
                start_new_session=True,
            )  # fmt: skip
        except OSError:
            self._log.close()
            raise
        self.pgid = self.process.pid  # its own session: the group is the process's pid

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def alive(self) -> bool:
        """Whether the server or any process it started is left."""
        return self.process.poll() is None or group_alive(self.pgid)

    def tail(self, chars: int) -> str:
        """The end of its output so far, secrets masked."""
        self._log.seek(0, os.SEEK_END)
        size = self._log.tell()
        self._log.seek(max(0, size - chars))
        text = self._log.read().decode("utf-8", errors="replace").strip()
        return masked(text, self._secrets)

    def wait_until(self, answer: Callable[[], T | None], timeout_s: float, poll_s: float) -> T:
        """``answer()`` every ``poll_s`` until it returns something (what it returned); a
        ``NotReady`` if the server exits first or ``timeout_s`` passes."""
        deadline = time.monotonic() + timeout_s
        while True:
            code = self.process.poll()
            if code is not None:
                raise NotReady(f"exited with code {code}", code)
            found = answer()
            if found is not None:
                return found
            if time.monotonic() > deadline:
                raise NotReady(f"did not answer within {timeout_s:g} s", None)
            time.sleep(poll_s)

    def kill(self) -> None:
        """SIGKILL to the whole group at once, without warning (a drill's crash), then reap;
        the output stays readable until ``stop``."""
        if group_alive(self.pgid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=STOP_GRACE_S)
        self._await_reaped()

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """SIGTERM to the group, SIGKILL to what is left after ``grace_s``, then reap."""
        if group_alive(self.pgid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pgid, signal.SIGTERM)
            deadline = time.monotonic() + grace_s
            while time.monotonic() < deadline and self.process.poll() is None:
                time.sleep(0.1)
            while time.monotonic() < deadline and group_alive(self.pgid):
                time.sleep(0.1)
            if group_alive(self.pgid):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=grace_s)
        self._await_reaped()
        self._log.close()

    def _await_reaped(self) -> None:
        # A process the server started is reaped by init once killed, not at once: wait
        # for that, so that the check after a stop sees the group as it will stay.
        deadline = time.monotonic() + _REAPED_S
        while time.monotonic() < deadline and group_alive(self.pgid):
            time.sleep(0.05)
