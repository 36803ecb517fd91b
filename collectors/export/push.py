"""Pushing a run's final metrics to a Prometheus Pushgateway.

``pushadd`` (POST) replaces only the metric families pushed, so the last-success
timestamp, pushed only by runs that completed, keeps its old value when a run fails:
an alert on its age then fires, as it should.
"""

from __future__ import annotations

import socket
import urllib.error
import urllib.parse
from collections.abc import Callable

from prometheus_client.exposition import basic_auth_handler, default_handler, pushadd_to_gateway

from moeperf.collectors.export.live_export import LiveExporter

JOB = "moeperf"


def redact_url(url: str) -> str:
    """The URL without user:password, for messages and logs."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    netloc = parts.hostname or ""
    if parts.port:
        netloc += f":{parts.port}"
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def push_run(
    gateway_url: str,
    exporter: LiveExporter,
    *,
    suite: str,
    target: str,
    success: bool,
    timeout_s: float = 10.0,
) -> str | None:
    """Push the run's registry grouped by {suite, target, host}; a warning if it failed.

    An unreachable Pushgateway never fails the run: the caller records the warning.
    """
    if success:
        exporter.mark_success()
    parts = urllib.parse.urlsplit(gateway_url)
    handler = default_handler
    if parts.username is not None:
        # Credentials in the URL become basic auth and are never echoed back.
        username, password = parts.username, parts.password or ""

        def handler(
            url: str,
            method: str,
            timeout: float | None,
            headers: list[tuple[str, str]],
            data: bytes,
        ) -> Callable[[], None]:
            return basic_auth_handler(url, method, timeout, headers, data, username, password)

    grouping_key = {"suite": suite, "target": target, "host": socket.gethostname()}
    try:
        pushadd_to_gateway(
            redact_url(gateway_url),
            job=JOB,
            registry=exporter.registry,
            grouping_key=grouping_key,
            timeout=timeout_s,
            handler=handler,
        )
    except (OSError, urllib.error.URLError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        return f"metrics not pushed to the Pushgateway at {redact_url(gateway_url)}: {reason}"
    return None
