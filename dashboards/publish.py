"""Push dashboards to a running Grafana over its HTTP API, with grafana-client.

The token comes from the caller (the CLI reads `GRAFANA_TOKEN`). It is sent only as the
`Authorization: Bearer` header: never printed, logged, or put into an error message, and
errors are raised `from None` so no library exception carrying request details is chained.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from .errors import DashboardsUsageError, PublishError

TOKEN_ENV = "GRAFANA_TOKEN"
TIMEOUT_S = 10.0
COMMIT_MESSAGE = "published by moeperf"
# "... (Caused by NewConnectionError('<...object at 0x..>: Failed to ...: [Errno 111] ...'))"
_CAUSE = re.compile(r"Caused by \w+\(['\"]?(?:<[^>]*>: )?(.*?)['\"]?\)\)?$")
_HINTS = {
    401: f"check {TOKEN_ENV}: a Grafana service-account token",
    403: "the token lacks permission: give its service account the Editor role",
    404: "is the URL Grafana's root, with its sub-path if it has one?",
}


def display_url(url: str) -> str:
    """`url` without user info, query or fragment: safe to print."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # IPv6
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def check_url(url: str) -> str:
    """The printable form of `url`; DashboardsUsageError unless it is an http(s) URL with a
    host."""
    try:
        parts = urlsplit(url)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
        shown = display_url(url) if ok else ""
    except ValueError:  # a bad port or bracket
        ok = False
    if not ok:
        raise DashboardsUsageError(
            "the Grafana URL must be http:// or https:// with a host, such as http://localhost:3000"
        )
    return shown


def folder_uid(title: str) -> str:
    """A Grafana folder uid (at most 40 of [a-z0-9_-]) derived from its title."""
    return re.sub(r"[^a-z0-9_-]+", "-", title.lower()).strip("-")[:40] or "moeperf"


def _redact(text: str, token: str | None) -> str:
    return text.replace(token, "***") if token else text


def _detail(exc: Any) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict) and response.get("message"):
        return str(response["message"])
    return str(getattr(exc, "message", "") or type(exc).__name__)


@contextmanager
def _grafana_errors(url: str, token: str | None, action: str) -> Iterator[None]:
    """Turn grafana-client and transport errors into a PublishError with URL and status."""
    from grafana_client.client import GrafanaException, GrafanaTimeoutError
    from niquests.exceptions import RequestException

    try:
        yield
    except GrafanaTimeoutError:
        message = f"Grafana at {url} did not answer within {TIMEOUT_S:g} s while {action}"
    except GrafanaException as exc:
        if not exc.status_code:  # a transport error grafana-client wrapped
            message = f"cannot reach Grafana at {url} while {action}: {_detail(exc)}"
        else:
            hint = _HINTS.get(exc.status_code, "")
            detail = _detail(exc)[:300]
            message = f"Grafana at {url} answered HTTP {exc.status_code} while {action}: {detail}"
            message += f" ({hint})" if hint else ""
    except RequestException as exc:  # connection refused, DNS, TLS: not wrapped by the client
        cause = _CAUSE.search(str(exc))
        reason = cause.group(1)[:300] if cause else type(exc).__name__
        message = f"cannot reach Grafana at {url} while {action}: {reason}"
    else:
        return
    raise PublishError(_redact(message, token)) from None


def _ensure_folder(api: Any, title: str, url: str) -> str:
    folders = api.folder.get_all_folders()
    if not isinstance(folders, list):  # an HTML page: something else answers at this URL
        raise PublishError(f"{url} does not answer like Grafana's HTTP API (GET /api/folders)")
    for folder in folders:
        if folder.get("title") == title:
            return folder["uid"]
    return api.folder.create_folder(title, uid=folder_uid(title))["uid"]


def publish(
    url: str,
    token: str | None,
    dashboards: list[dict],
    folder: str = "moeperf",
    overwrite: bool = True,
) -> list[dict]:
    """Create `folder` if missing, then save each dashboard JSON into it.

    Returns Grafana's answer per dashboard (uid, url, version, status). Raises
    DashboardsUsageError for a URL that is not http(s) and PublishError when Grafana is
    unreachable or refuses.
    """
    shown = check_url(url)
    from grafana_client import GrafanaApi

    api = GrafanaApi.from_url(url, credential=token or None, timeout=TIMEOUT_S)
    try:
        with _grafana_errors(shown, token, f"looking up folder {folder!r}"):
            uid = _ensure_folder(api, folder, shown)
        results = []
        for dashboard in dashboards:
            payload = {
                "dashboard": {k: v for k, v in dashboard.items() if k != "id"},
                "folderUid": uid,
                "overwrite": overwrite,
                "message": COMMIT_MESSAGE,
            }
            with _grafana_errors(shown, token, f"saving dashboard {dashboard.get('uid')!r}"):
                results.append(api.dashboard.update_dashboard(payload))
        return results
    finally:
        api.client.s.close()


def publish_command(
    url: str, env: Mapping[str, str] = os.environ, out: Callable[[str], object] = print
) -> int:
    """`moeperf dashboards publish --url URL`: 0 when every dashboard is published.

    Raises DashboardsUsageError (exit 2) for a bad URL or a missing extra, before any
    request, and PublishError (exit 1) when Grafana fails; the CLI reports both.
    """
    shown = check_url(url)
    try:
        import grafana_client  # noqa: F401  (only to fail early with a clear message)

        from .build import DASHBOARDS, dashboard_json
    except ImportError as exc:
        raise DashboardsUsageError(
            f"publishing needs the dashboards extra (missing {exc.name}): "
            "pip install 'moeperf[dashboards]'"
        ) from None

    token = env.get(TOKEN_ENV) or None
    if token is None:
        out(f"note: {TOKEN_ENV} is not set; publishing without a token")
    dashboards = [dashboard_json(build()) for build in DASHBOARDS.values()]
    results = publish(url, token, dashboards)
    for dashboard, result in zip(dashboards, results, strict=True):
        out(f"published {dashboard['title']!r} to {shown}{result.get('url', '')}")
    return 0
