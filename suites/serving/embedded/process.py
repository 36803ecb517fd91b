"""Starting the embedded reference targets as child processes on 127.0.0.1.

A target runs in its own process so it does not share the harness's event loop or GIL,
as a real server would not.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from suites.errors import TargetError
from targets.ready_line import ChildNotReady, start_ready

_READY_TIMEOUT_S = 30.0
_STDERR_TAIL_CHARS = 500


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
    try:
        # Its own session: Ctrl-C in the terminal reaches only moeperf, which ends the run
        # and then stops the target, instead of the target dying under requests in flight.
        child = start_ready(command, timeout_s=ready_timeout_s, new_session=True)
    except ChildNotReady as exc:
        tail = exc.stderr_tail[-_STDERR_TAIL_CHARS:]
        raise TargetError(f"{module} did not start ({exc.why}): {tail}") from None
    with child:
        yield child.url
