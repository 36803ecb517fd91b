"""A server command template, as a deployment sweep's arms (``deploy_sweep.command``) and an
elastic run's replicas (``elastic.command``) are started from.

The template is split like a shell line (``shlex``) and run without a shell. Its
placeholders: ``{port}``, a free port on 127.0.0.1 picked per start; named values (a sweep's
grid knobs, a replica's ``{replica}`` index); ``{env:NAME}``, the variable NAME's value read
at launch. The template as written is what a run stores; a value read from the environment
is returned as a secret, to be masked wherever the server's output is kept.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping

from moeperf.suites.errors import TargetError

_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_ENV = "env:"


def placeholders(template: str) -> set[str]:
    """The names inside ``{...}`` in ``template`` ("port", named values, "env:NAME")."""
    return set(_PLACEHOLDER.findall(template))


def render(
    template: str,
    port: int,
    values: Mapping[str, object],
    environ: Mapping[str, str],
    field: str,
) -> tuple[list[str], list[str]]:
    """(the command's arguments, the secret values it holds). A placeholder that is not
    ``port``, a named value or a set ``env:NAME`` is a ``TargetError`` naming ``field``."""
    secrets: list[str] = []

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name == "port":
            return str(port)
        if name in values:
            return str(values[name])
        if name.startswith(_ENV):
            variable = name[len(_ENV) :]
            if variable not in environ:
                raise TargetError(
                    f"{field}: {{{name}}} names the environment variable {variable}, which "
                    "is not set"
                )
            secrets.append(environ[variable])
            return environ[variable]
        named = ", ".join("{" + k + "}" for k in values)
        raise TargetError(
            f"{field}: {{{name}}} is not a placeholder (valid: {{port}}, {named}, {{env:NAME}})"
        )

    return [_PLACEHOLDER.sub(value, part) for part in shlex.split(template)], secrets
