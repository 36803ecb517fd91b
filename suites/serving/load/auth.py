"""The headers every request to the target carries: an API key and the spec's own headers.

``request_headers`` resolves ``target.api_key_env`` and ``target.headers`` against the
environment once, when a run starts, before anything is sent or stored: a variable that
is unset or empty is a ``UsageError`` (exit 2) naming it and its spec key. The result, a
``RequestHeaders``, travels to the load workers by pickling (never through a file) and is
what the pre-flight, the tokenizer, the scraper and the workers send.

The rule is simple: no header value is ever written anywhere. The manifest gets where
each header came from (``described``), the stored copies of the spec get fixed values
masked (``without_header_values``), and every text that comes back from the target or
from an exception goes through ``redact`` before it is stored or shown, since a server
may echo what it was sent.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from moeperf.suites.errors import UsageError

if TYPE_CHECKING:  # the workers unpickle RequestHeaders without loading the spec models
    from moeperf.suites.serving.target_spec import TargetSpec

MASK = "***"
AUTHORIZATION = "Authorization"

Headers = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class RequestHeaders:
    """Headers to send, each value's origin, and the values that are secrets."""

    # (name, value) in the order they are sent; not in repr: a repr may end up in a log.
    values: Headers = field(default=(), repr=False)
    # Every value that came from an environment variable, to mask wherever it shows up.
    secrets: tuple[str, ...] = field(default=(), repr=False)
    # (name, "env NAME" or "fixed"): what the manifest says of each header.
    origins: tuple[tuple[str, str], ...] = ()

    def described(self) -> dict[str, str]:
        """For the manifest: each header's name and where its value came from."""
        return dict(self.origins)

    def redact(self, text: str) -> str:
        """``text`` with every secret masked."""
        return redact(text, self.secrets)


NO_HEADERS = RequestHeaders()


class MissingHeaderValue(UsageError):
    """An environment variable the spec reads a header from is unset or empty."""


def request_headers(target: TargetSpec, environ: Mapping[str, str]) -> RequestHeaders:
    """The headers of ``target`` (its ``api_key_env``, then its ``headers`` in order) with
    values from ``environ``; ``MissingHeaderValue`` names every variable that is unset or
    empty, and never a value."""
    # (header, variable or None for a fixed value, the fixed value or the spec key)
    entries: list[tuple[str, str | None, str]] = []
    if target.api_key_env:
        entries.append((AUTHORIZATION, target.api_key_env, "target.api_key_env"))
    for name, value in target.headers.items():
        if isinstance(value, str):
            entries.append((name, None, value))
        else:
            entries.append((name, value.env, f"target.headers.{name}"))
    problems = [p for p in (_problem(var, key, environ.get(var)) for _, var, key in entries
                            if var) if p]  # fmt: skip
    if problems:
        them = "it" if len(problems) == 1 else "them"
        raise MissingHeaderValue(
            "; ".join(problems) + f". Export {them} before the run; nothing was "
            "sent and no run was stored"
        )
    values: list[tuple[str, str]] = []
    origins: list[tuple[str, str]] = []
    secrets: list[str] = []
    for name, variable, fixed in entries:
        if variable is None:
            values.append((name, fixed))
            origins.append((name, "fixed"))
            continue
        secret = environ[variable]
        secrets.append(secret)
        values.append((name, f"Bearer {secret}" if name == AUTHORIZATION else secret))
        origins.append((name, f"env {variable}"))
    return RequestHeaders(tuple(values), tuple(secrets), tuple(origins))


def _problem(variable: str, key: str, value: str | None) -> str:
    """Why ``value`` of ``variable`` cannot be sent ("" if it can); never the value."""
    if not value:
        state = "not set" if value is None else "empty"
        return f"{key} reads the environment variable {variable}, which is {state}"
    if any(c in value for c in "\r\n\0"):
        return f"{key}: the environment variable {variable} holds a line break or NUL"
    return ""


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of each secret replaced by ``***``.

    Longest first, so a secret that contains another is masked whole. Call it before any
    truncation: a cut could leave part of a secret that no longer matches.
    """
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text


def without_header_values(spec_data: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of spec data (as given or as resolved) for the manifest: each fixed value of
    ``target.headers`` is ``***``; ``{ env = "NAME" }`` entries name a variable, and stay."""
    data = copy.deepcopy(dict(spec_data))
    target = data.get("target")
    headers = target.get("headers") if isinstance(target, dict) else None
    if isinstance(headers, dict):
        for name, value in headers.items():
            if not isinstance(value, Mapping):
                headers[name] = MASK
    return data
