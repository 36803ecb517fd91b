"""Starting the embedded reference targets as child processes on 127.0.0.1.

A target runs in its own process so it does not share the harness's event loop or GIL,
as a real server would not.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from suites.errors import TargetError

_READY_TIMEOUT_S = 30.0


@contextmanager
def running_target(
    module: str, config: dict[str, Any], ready_timeout_s: float = _READY_TIMEOUT_S
) -> Iterator[str]:
    """Run ``python -m module --port 0 --config JSON``; yield its base URL; stop it after.

    The child prints ``READY http://127.0.0.1:PORT`` once it listens, and exits by itself
    if this process dies without stopping it (``--exit-with-parent``). A target that loads
    a model needs a longer ``ready_timeout_s``.
    """
    command = [sys.executable, "-m", module, "--host", "127.0.0.1", "--port", "0"]
    command += ["--config", json.dumps(config), "--exit-with-parent"]
    # stderr goes to a file: an unread pipe would block a chatty child.
    with tempfile.TemporaryFile(mode="w+") as stderr:
        # Its own session: Ctrl-C in the terminal reaches only moeperf, which ends the run
        # and then stops the target, instead of the target dying under requests in flight.
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            start_new_session=True,
        )
        try:
            yield _await_ready(process, module, stderr, ready_timeout_s)
        finally:
            _stop(process)


def _stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    if process.stdout is not None:
        process.stdout.close()


def _await_ready(process: subprocess.Popen, module: str, stderr, timeout_s: float) -> str:
    found: list[str] = []

    def read() -> None:
        for line in process.stdout:  # type: ignore[union-attr]
            if line.startswith("READY "):
                found.append(line.split(" ", 1)[1].strip())
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout_s)
    if not found:
        code = process.poll()
        process.kill()
        process.wait()
        stderr.seek(0)
        err = stderr.read().strip()[-500:]
        why = f"exited with code {code}" if code is not None else f"not ready in {timeout_s:.0f} s"
        raise TargetError(f"{module} did not start ({why}): {err}")
    return found[0]
