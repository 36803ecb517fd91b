"""Before any load: does the target answer, and which model does it serve?

GET /v1/models, falling back to GET /health when the models endpoint does not answer
with a list; each within ``PREFLIGHT_TIMEOUT_S``. A target that answers neither is refused
(``TargetUnreachable``, exit 2) with the URL and what happened, before a run is stored;
one that answers 401 or 403 (``TargetUnauthorized``, exit 2) says how to send credentials.
The GETs carry the run's headers (``suites/serving/load/auth.py``), bound into ``get``.
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from moeperf.suites.errors import UsageError
from moeperf.suites.serving.load.auth import NO_HEADERS, RequestHeaders

PREFLIGHT_TIMEOUT_S = 5.0


class TargetUnreachable(UsageError):
    """The target did not answer the pre-flight check: nothing was sent, no run stored."""


class TargetUnauthorized(UsageError):
    """The target answered the pre-flight with 401 or 403: every request would fail so."""


@dataclass(frozen=True, slots=True)
class Answer:
    """One HTTP call: its status and body, or what went wrong instead (``problem``)."""

    status: int | None
    body: bytes = b""
    problem: str | None = None
    # True when no HTTP answer came at all (refused, timed out, no such host).
    unreachable: bool = False


@dataclass(frozen=True, slots=True)
class TargetCheck:
    """What the pre-flight found: the models the target lists (may be empty)."""

    models: tuple[str, ...]
    checked: str  # the endpoint that answered, for the record
    # Model id -> its context limit in tokens (prompt + output), where /v1/models says
    # (vLLM, SGLang and moeperf's targets give ``max_model_len``; OpenAI itself does not).
    context_tokens: Mapping[str, int] = field(default_factory=dict)

    def context_of(self, model: str) -> int | None:
        """The context limit the target states for ``model`` (None: it states none)."""
        return self.context_tokens.get(model)


Getter = Callable[[str, float], Answer]


def http_get(url: str, timeout_s: float, headers: RequestHeaders = NO_HEADERS) -> Answer:
    """One GET with urllib, sending ``headers``; every failure becomes an ``Answer``
    naming it (with the headers' secrets masked: a server may echo them)."""
    return _http("GET", url, timeout_s, headers)


def http_post(url: str, timeout_s: float, headers: RequestHeaders = NO_HEADERS) -> Answer:
    """One POST without a body, as ``http_get`` (an admin action: a cache reset)."""
    return _http("POST", url, timeout_s, headers)


def _http(method: str, url: str, timeout_s: float, headers: RequestHeaders) -> Answer:
    data = b"" if method == "POST" else None
    request = urllib.request.Request(url, data=data, headers=dict(headers.values), method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return Answer(response.status, response.read())
    except urllib.error.HTTPError as exc:
        return Answer(exc.code, b"", headers.redact(f"HTTP {exc.code} {exc.reason}"))
    except urllib.error.URLError as exc:
        problem = _describe(exc.reason, timeout_s)
        return Answer(None, b"", headers.redact(problem), unreachable=True)
    except (TimeoutError, OSError) as exc:  # a timeout while reading the answer
        return Answer(None, b"", headers.redact(_describe(exc, timeout_s)), unreachable=True)


def _describe(reason: object, timeout_s: float) -> str:
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused (nothing listens on that port?)"
    if isinstance(reason, TimeoutError | socket.timeout):
        return f"no answer within {timeout_s:g} s (timeout)"
    if isinstance(reason, socket.gaierror):
        return f"host name not resolved ({reason})"
    return str(reason)


def _models(body: bytes) -> tuple[tuple[str, ...], dict[str, int]] | None:
    """Model ids of an OpenAI /v1/models body and the context limits it states; None
    when the body is not a model list."""
    try:
        data = json.loads(body).get("data")
        models = tuple(str(m["id"]) for m in data)
    except (ValueError, AttributeError, TypeError, KeyError):
        return None
    limits = {
        str(m["id"]): m["max_model_len"]
        for m in data
        if type(m.get("max_model_len")) is int and m["max_model_len"] > 0
    }
    return models, limits


def check_target(
    base_url: str, get: Getter = http_get, timeout_s: float = PREFLIGHT_TIMEOUT_S
) -> TargetCheck:
    """The target's models if it answers; raise ``TargetUnreachable`` if it does not."""
    base = base_url.rstrip("/")
    models_url, health_url = base + "/v1/models", base + "/health"
    answer = get(models_url, timeout_s)
    if answer.status in (401, 403):
        # Its /health may well be open (vLLM's is): that would not make the load succeed.
        raise TargetUnauthorized(
            f"target {base_url} refused GET {models_url} ({answer.problem or answer.status}): "
            "it wants credentials the harness did not send, or not the ones it sent; set "
            "target.api_key_env to the name of an environment variable holding the API key "
            "(and target.headers for any other header it needs); nothing was sent and no run "
            "was stored"
        )
    if answer.status == 200:
        listed = _models(answer.body)
        if listed is not None:
            return TargetCheck(listed[0], models_url, listed[1])
        answer = Answer(200, answer.body, "HTTP 200 but not a model list")
    seen = [f"GET {models_url}: {answer.problem or f'HTTP {answer.status}'}"]
    if not answer.unreachable:  # it answers HTTP: its health endpoint may say more
        health = get(health_url, timeout_s)
        if health.status is not None and 200 <= health.status < 300:
            return TargetCheck((), health_url)
        seen.append(f"GET {health_url}: {health.problem or f'HTTP {health.status}'}")
    raise TargetUnreachable(
        f"target {base_url} does not answer: {'; '.join(seen)}. Start the server or fix "
        "target.url; nothing was sent and no run was stored"
    )


def served_model(spec_model: str, check: TargetCheck, base_url: str) -> str:
    """The model to ask for: the spec's, else the first the target lists; never a guess."""
    if spec_model:
        return spec_model
    if check.models:
        return check.models[0]
    raise UsageError(
        f"target {base_url} answers {check.checked} but lists no model at /v1/models: "
        "set target.model (e.g. --set target.model=NAME)"
    )
