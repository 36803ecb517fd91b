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

import contextlib
import os
import re
import shlex
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from typing import IO, Any

from moeperf.suites.errors import TargetError
from moeperf.suites.serving.mode_spec import GridValue
from moeperf.suites.serving.preflight import TargetCheck, TargetUnreachable, check_target

_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_ENV = "env:"
_POLL_S = 0.25
_STOP_GRACE_S = 20.0
_TAIL_CHARS = 1500
MASK = "***"


def placeholders(template: str) -> set[str]:
    """The names inside ``{...}`` in ``template`` ("port", knobs, "env:NAME")."""
    return set(_PLACEHOLDER.findall(template))


def render(
    template: str, port: int, knobs: Mapping[str, GridValue], environ: Mapping[str, str]
) -> tuple[list[str], list[str]]:
    """(the command's arguments, the secret values it holds). A placeholder that is not
    ``port``, a knob or a set ``env:NAME`` is a ``TargetError``."""
    secrets: list[str] = []

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name == "port":
            return str(port)
        if name in knobs:
            return str(knobs[name])
        if name.startswith(_ENV):
            variable = name[len(_ENV) :]
            if variable not in environ:
                raise TargetError(
                    f"deploy_sweep.command: {{{name}}} names the environment variable "
                    f"{variable}, which is not set"
                )
            secrets.append(environ[variable])
            return environ[variable]
        raise TargetError(
            f"deploy_sweep.command: {{{name}}} is not a placeholder (valid: {{port}}, the grid's "
            f"knobs {', '.join('{' + k + '}' for k in knobs)}, {{env:NAME}})"
        )

    return [_PLACEHOLDER.sub(value, part) for part in shlex.split(template)], secrets


def masked(text: str, secrets: list[str]) -> str:
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
        argv, self._secrets = render(template, port, knobs, environ)
        self.url = url_template.format(port=port)
        # The server's output, for the reason of a start that fails: kept past this call.
        self._log: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115
        try:
            self._process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        except OSError as exc:
            self._log.close()
            raise TargetError(f"could not launch {masked(argv[0], self._secrets)}: {exc}") from None
        self.pgid = self._process.pid  # its own session: the group is the process's pid
        try:
            self.check = self._wait(get, timeout_s)
        except BaseException:
            self.close()
            raise

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def alive(self) -> bool:
        """Whether the server or any process it started is left."""
        return self._process.poll() is None or group_alive(self.pgid)

    def _tail(self) -> str:
        self._log.seek(0, os.SEEK_END)
        size = self._log.tell()
        self._log.seek(max(0, size - _TAIL_CHARS))
        text = self._log.read().decode("utf-8", errors="replace").strip()
        return masked(text, self._secrets)

    def _wait(self, get: Callable[[str, float], Any], timeout_s: float) -> TargetCheck:
        deadline = time.monotonic() + timeout_s
        while True:
            code = self._process.poll()
            if code is not None:
                raise TargetError(
                    f"the server exited with code {code} before answering: {self._tail()}"
                )
            try:
                return check_target(self.url, get, timeout_s=2.0)
            except TargetUnreachable:
                pass
            if time.monotonic() > deadline:
                raise TargetError(
                    f"the server did not answer at {self.url} within {timeout_s:g} s "
                    f"(deploy_sweep.startup_timeout_s): {self._tail()}"
                )
            time.sleep(_POLL_S)

    def close(self) -> None:
        """SIGTERM to the group, SIGKILL to what is left after the grace, then reap."""
        if group_alive(self.pgid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pgid, signal.SIGTERM)
            deadline = time.monotonic() + _STOP_GRACE_S
            while time.monotonic() < deadline and self._process.poll() is None:
                time.sleep(0.1)
            while time.monotonic() < deadline and group_alive(self.pgid):
                time.sleep(0.1)
            if group_alive(self.pgid):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._process.wait(timeout=_STOP_GRACE_S)
        self._log.close()
