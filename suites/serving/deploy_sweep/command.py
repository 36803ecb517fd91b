"""A deployment sweep arm started from a command template (``deploy_sweep.command``): a
server moeperf launches with the arm's knobs, waits for, and stops.

The template is split like a shell line (``shlex``) and run without a shell. Its
placeholders: ``{port}``, a free port on 127.0.0.1 picked per start; each grid knob by name
(``{max_num_seqs}``); ``{env:NAME}``, the variable NAME's value read at launch. The
template as written is what the run stores; a value read from the environment is never
written anywhere (the end of the server's output, kept for a start that failed, has each
such value masked).

The server runs in a session of its own; the stop sends SIGTERM to that whole process group
(a server's engine and worker processes with it), waits, then SIGKILLs what is left.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from moeperf.suites.errors import TargetError
from moeperf.suites.serving.command_template import render
from moeperf.suites.serving.launched_server import LaunchedServer, NotReady, masked
from moeperf.suites.serving.mode_spec import GridValue
from moeperf.suites.serving.preflight import TargetCheck, TargetUnreachable, check_target

_POLL_S = 0.25
_TAIL_CHARS = 1500


class CommandTarget:
    """One start of an arm's server command, as the sweep's visit holds it."""

    def __init__(
        self,
        template: str,
        url_template: str,
        knobs: Mapping[str, GridValue],
        port: int,
        timeout_s: float,
        get: Callable[[str, float], Any],
        environ: Mapping[str, str] = os.environ,
    ):
        argv, secrets = render(template, port, knobs, environ, "deploy_sweep.command")
        self.url = url_template.format(port=port)
        try:
            self._server = LaunchedServer(argv, secrets=secrets)
        except OSError as exc:
            raise TargetError(f"could not launch {masked(argv[0], secrets)}: {exc}") from None
        try:
            self.check = self._wait(get, timeout_s)
        except BaseException:
            self.close()
            raise

    @property
    def pid(self) -> int:
        return self._server.pid

    @property
    def alive(self) -> bool:
        """Whether the server or any process it started is left."""
        return self._server.alive

    def _wait(self, get: Callable[[str, float], Any], timeout_s: float) -> TargetCheck:
        def answered() -> TargetCheck | None:
            try:
                return check_target(self.url, get, timeout_s=2.0)
            except TargetUnreachable:
                return None

        try:
            return self._server.wait_until(answered, timeout_s, _POLL_S)
        except NotReady as exc:
            tail = self._server.tail(_TAIL_CHARS)
            if exc.exit_code is not None:
                raise TargetError(
                    f"the server exited with code {exc.exit_code} before answering: {tail}"
                ) from None
            raise TargetError(
                f"the server did not answer at {self.url} within {timeout_s:g} s "
                f"(deploy_sweep.startup_timeout_s): {tail}"
            ) from None

    def close(self) -> None:
        """SIGTERM to the group, SIGKILL to what is left after the grace, then reap."""
        self._server.stop()
