"""The READY line: how a target child process tells the process that started it where it
listens, both sides of it.

The child prints exactly one line to stdout, ``READY http://HOST:PORT``, once it listens,
so it can be started with ``--port 0`` and still be reached. The parent reads the child's
stdout until that line, within a timeout; a child that exits or stays silent until then
is a ``ChildNotReady`` carrying the end of what it wrote to stderr.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO

READY_PREFIX = "READY "
STDERR_TAIL_CHARS = 3000
_STOP_TIMEOUT_S = 10.0
_READER_JOIN_S = 1.0  # the reader sees EOF once the child is killed


def base_url(host: str, port: int) -> str:
    """``http://HOST:PORT`` (no trailing slash), with an IPv6 host in brackets."""
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{port}"


def announce_ready(url: str) -> None:
    """The child's side: say it listens at ``url``. Its only line on stdout."""
    print(f"{READY_PREFIX}{url}", flush=True)


class ChildNotReady(Exception):
    """The child exited, or printed no READY line in time; ``stderr_tail`` says why."""

    def __init__(self, exit_code: int | None, timeout_s: float, stderr_tail: str) -> None:
        self.exit_code = exit_code
        self.stderr_tail = stderr_tail
        if exit_code is not None:
            self.why = f"exited with code {exit_code}"
        else:
            self.why = f"not ready in {timeout_s:.0f} s"
        super().__init__(f"{self.why}: {stderr_tail}")


@dataclass
class ReadyChild:
    """A child that printed its READY line; a context manager that stops it at the end.

    Its stdout is still open after the READY line (whatever else it writes is left to
    read); stderr goes to a file, since a pipe nobody reads would block a chatty child.
    """

    process: subprocess.Popen[str]
    url: str
    _stderr: IO[bytes]

    def stderr_tail(self, chars: int = STDERR_TAIL_CHARS) -> str:
        """The end of what the child wrote to stderr so far."""
        return _tail(self._stderr, chars)

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout_s: float = _STOP_TIMEOUT_S) -> int:
        """Send ``sig``, wait up to ``timeout_s``, kill after that; the exit code."""
        self.process.send_signal(sig)  # nothing happens if it exited already
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()

    def close(self) -> None:
        """Kill the child if it still runs, and close its stdout and stderr."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._stderr.close()

    def __enter__(self) -> ReadyChild:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            self.stop()
        finally:
            self.close()


def start_ready(
    command: Sequence[str],
    *,
    timeout_s: float,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    new_session: bool = False,
) -> ReadyChild:
    """The parent's side: start ``command`` and wait for its READY line.

    ``new_session`` puts the child in its own session, so a Ctrl-C in the terminal reaches
    only the parent, which then stops the child in its own time.
    """
    stderr = tempfile.TemporaryFile()  # noqa: SIM115 (ReadyChild.close closes it)
    try:
        process = subprocess.Popen(
            list(command),
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            start_new_session=new_session,
        )
    except BaseException:
        stderr.close()
        raise
    try:
        url = _await_ready(process, stderr, timeout_s)
    except BaseException:
        ReadyChild(process, "", stderr).close()
        raise
    return ReadyChild(process, url, stderr)


def _await_ready(process: subprocess.Popen[str], stderr: IO[bytes], timeout_s: float) -> str:
    # A thread, not a select() on the pipe: that works on every platform, and the wait
    # ends as soon as the child closes its stdout (it died).
    found: list[str] = []
    stdout = process.stdout
    assert stdout is not None  # started with stdout=PIPE

    def read() -> None:
        for line in stdout:
            if line.startswith(READY_PREFIX):
                found.append(line[len(READY_PREFIX) :].strip())
                return

    reader = threading.Thread(target=read, name="ready-line", daemon=True)
    reader.start()
    reader.join(timeout_s)
    if found:
        return found[0]
    code = process.poll()
    process.kill()  # the reader then sees EOF and ends before its stdout is closed
    process.wait()
    reader.join(_READER_JOIN_S)
    raise ChildNotReady(code, timeout_s, _tail(stderr, STDERR_TAIL_CHARS))


def _tail(stderr: IO[bytes], chars: int) -> str:
    fd = stderr.fileno()
    if hasattr(os, "pread"):
        # Read at an offset, not seek(0) and read: the child shares the file offset and
        # would write over the start of the file while we read.
        data = os.pread(fd, os.fstat(fd).st_size, 0)
    else:  # Windows
        stderr.seek(0)
        data = stderr.read()
    return data.decode(errors="replace").strip()[-chars:]
