"""Publishing dashboards to Grafana, against a fake Grafana HTTP API.

grafana-client (5.x) speaks HTTP through niquests, not requests, and niquests' Session only
accepts its own Response objects, so requests_mock's stock Mocker cannot intercept it. The
`requests_mock_niquests` fixture imports a private copy of requests_mock while `requests`
names niquests (the recipe of niquests' migration guide and of grafana-client's own tests),
then restores sys.modules: requests and the real requests_mock stay as they were for every
other test. Connection failures use a real closed port rather than a mock.
"""

from __future__ import annotations

import importlib
import logging
import sys

import niquests
import niquests.adapters
import niquests.cookies
import niquests.exceptions
import niquests.utils
import pytest
import urllib3_future
import urllib3_future.response

from moeperf.dashboards.build import DASHBOARDS, dashboard_json
from moeperf.dashboards.errors import DashboardsUsageError, PublishError
from moeperf.dashboards.publish import display_url, folder_uid, publish, publish_command
from moeperf.exits import exit_code

TOKEN = "glsa_s3cr3t-T0KEN-value"
URL = "http://grafana.test:3000"
API = f"{URL}/api"
JSON = {"Content-Type": "application/json"}


@pytest.fixture(scope="module")
def requests_mock_niquests():
    """requests_mock, imported against niquests and urllib3-future (see the module doc)."""
    aliases = {
        "requests": niquests,
        "requests.adapters": niquests.adapters,
        "requests.cookies": niquests.cookies,
        "requests.exceptions": niquests.exceptions,
        "requests.utils": niquests.utils,
        "urllib3": urllib3_future,
        "urllib3.response": urllib3_future.response,
    }

    def ours(name: str) -> bool:
        return name in aliases or name == "requests_mock" or name.startswith("requests_mock.")

    saved = {name: module for name, module in sys.modules.items() if ours(name)}
    for name in saved:
        del sys.modules[name]
    sys.modules.update(aliases)
    try:
        module = importlib.import_module("requests_mock")
    finally:
        for name in [name for name in sys.modules if ours(name)]:
            del sys.modules[name]
        sys.modules.update(saved)
    assert module.mocker.requests is niquests
    return module


@pytest.fixture
def grafana(requests_mock_niquests):
    """A fake Grafana: no folders yet, and it accepts every dashboard."""

    def saved(request, context):
        uid = request.json()["dashboard"]["uid"]
        return {"status": "success", "uid": uid, "url": f"/d/{uid}/x", "version": 1}

    with requests_mock_niquests.Mocker() as mock:
        mock.get(f"{API}/folders", json=[], headers=JSON)
        mock.post(
            f"{API}/folders", json={"uid": "moeperf", "title": "moeperf", "id": 7}, headers=JSON
        )
        mock.post(f"{API}/dashboards/db", json=saved, headers=JSON)
        yield mock


def _dashboards() -> list[dict]:
    return [dashboard_json(build()) for build in DASHBOARDS.values()]


def _calls(mock) -> list[tuple[str, str]]:
    return [(r.method, r.path) for r in mock.request_history]


def test_publish_creates_the_folder_then_posts_each_dashboard_with_overwrite(grafana):
    dashboards = _dashboards()
    results = publish(URL, TOKEN, dashboards)

    assert _calls(grafana) == [
        ("GET", "/api/folders"),
        ("POST", "/api/folders"),
        *[("POST", "/api/dashboards/db")] * len(dashboards),
    ]
    history = grafana.request_history
    assert history[1].json() == {"title": "moeperf", "uid": "moeperf"}
    for request, dashboard in zip(history[2:], dashboards, strict=True):
        body = request.json()
        assert body["overwrite"] is True
        assert body["folderUid"] == "moeperf"
        assert body["dashboard"] == dashboard
    for request in history:
        assert request.headers["Authorization"] == f"Bearer {TOKEN}"
    assert [r["uid"] for r in results] == ["moeperf-serving", "moeperf-training"]


def test_publish_reuses_an_existing_folder_and_drops_the_instance_id(grafana):
    grafana.get(f"{API}/folders", json=[{"uid": "abc123", "title": "moeperf"}], headers=JSON)
    dashboard = {"uid": "u1", "title": "t", "id": 42, "panels": []}

    publish(URL, TOKEN, [dashboard], overwrite=False)

    assert _calls(grafana) == [("GET", "/api/folders"), ("POST", "/api/dashboards/db")]
    body = grafana.request_history[-1].json()
    assert body["folderUid"] == "abc123"
    assert body["overwrite"] is False
    assert body["dashboard"] == {"uid": "u1", "title": "t", "panels": []}


def test_publish_command_publishes_every_dashboard_and_never_prints_the_token(grafana, caplog):
    caplog.set_level(logging.DEBUG)
    lines: list[str] = []

    assert publish_command(URL, env={"GRAFANA_TOKEN": TOKEN}, out=lines.append) == 0

    posts = [r for r in grafana.request_history if r.path == "/api/dashboards/db"]
    assert len(posts) == len(DASHBOARDS)
    assert lines == [
        f"published 'moeperf serving' to {URL}/d/moeperf-serving/x",
        f"published 'moeperf training' to {URL}/d/moeperf-training/x",
    ]
    assert TOKEN not in "\n".join(lines) + caplog.text


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (401, {"message": "invalid API key"}, "HTTP 401 while looking up folder 'moeperf'"),
        (403, {"message": "access denied"}, "HTTP 403 while looking up folder 'moeperf'"),
        (404, {"message": "Not found"}, "HTTP 404 while looking up folder 'moeperf': Not found"),
        (500, "oops", "HTTP 500"),
    ],
)
def test_grafana_errors_become_publish_errors_without_the_token(grafana, status, body, expected):
    # A server that echoes the request back must not get the token into the message either.
    text = body if isinstance(body, str) else None
    payload = {**body, "echo": f"Bearer {TOKEN}"} if isinstance(body, dict) else None
    if payload:
        payload["message"] += f" (got Bearer {TOKEN})"
    grafana.get(f"{API}/folders", status_code=status, json=payload, text=text, headers=JSON)

    with pytest.raises(PublishError) as caught:
        publish(URL, TOKEN, _dashboards())

    message = str(caught.value)
    assert expected in message and f"Grafana at {URL}" in message
    assert TOKEN not in message
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    assert _calls(grafana) == [("GET", "/api/folders")]


def test_something_that_is_not_grafana_is_a_publish_error(grafana):
    grafana.get(f"{API}/folders", text="<html>hello</html>", headers={"Content-Type": "text/html"})
    with pytest.raises(PublishError, match="does not answer like Grafana's HTTP API"):
        publish(URL, TOKEN, _dashboards())


def test_a_refused_dashboard_save_names_the_dashboard(grafana):
    grafana.post(
        f"{API}/dashboards/db", status_code=403, json={"message": "Permission denied"}, headers=JSON
    )
    with pytest.raises(PublishError, match=r"HTTP 403 while saving dashboard 'moeperf-serving'"):
        publish(URL, TOKEN, _dashboards())


def test_publish_command_exits_1_on_401_without_printing_the_token(grafana, caplog):
    caplog.set_level(logging.DEBUG)
    grafana.get(
        f"{API}/folders", status_code=401, json={"message": "invalid API key"}, headers=JSON
    )
    lines: list[str] = []

    with pytest.raises(PublishError) as caught:
        publish_command(URL, env={"GRAFANA_TOKEN": TOKEN}, out=lines.append)

    assert exit_code(caught.value) == 1
    output = "\n".join([*lines, str(caught.value)])
    assert "HTTP 401" in output and URL in output and "GRAFANA_TOKEN" in output
    assert TOKEN not in output + caplog.text


def test_connection_refused_exits_1_with_the_url_and_not_the_token(unused_tcp_port, caplog):
    caplog.set_level(logging.DEBUG)
    url = f"http://127.0.0.1:{unused_tcp_port}"
    lines: list[str] = []

    with pytest.raises(PublishError) as caught:
        publish_command(url, env={"GRAFANA_TOKEN": TOKEN}, out=lines.append)

    assert exit_code(caught.value) == 1
    output = "\n".join([*lines, str(caught.value)])
    assert f"cannot reach Grafana at {url}" in output
    assert "refused" in output.lower()
    assert TOKEN not in output + caplog.text


def test_publish_raises_publish_error_when_unreachable(unused_tcp_port):
    with pytest.raises(PublishError, match="cannot reach Grafana") as caught:
        publish(f"http://127.0.0.1:{unused_tcp_port}", TOKEN, [])
    assert TOKEN not in str(caught.value)


@pytest.mark.parametrize(
    "url", ["ftp://grafana.test", "grafana.test:3000", "localhost", "", "http://", "http://h:x"]
)
def test_a_url_that_is_not_http_exits_2_before_any_request(grafana, url):
    lines: list[str] = []
    with pytest.raises(DashboardsUsageError) as caught:
        publish_command(url, env={"GRAFANA_TOKEN": TOKEN}, out=lines.append)
    assert exit_code(caught.value) == 2
    assert "http:// or https://" in str(caught.value)
    assert grafana.request_history == []
    with pytest.raises(DashboardsUsageError):
        publish(url, TOKEN, [])


def test_without_a_token_no_authorization_header_is_sent(grafana):
    lines: list[str] = []
    assert publish_command(URL, env={}, out=lines.append) == 0
    assert "GRAFANA_TOKEN is not set" in lines[0]
    assert all("Authorization" not in r.headers for r in grafana.request_history)


def test_printable_urls_and_folder_uids():
    assert display_url("https://admin:pw@grafana.example:3443/grafana/?verify=false") == (
        "https://grafana.example:3443/grafana"
    )
    assert display_url("http://[::1]:3000") == "http://[::1]:3000"
    assert folder_uid("moeperf") == "moeperf"
    assert folder_uid("MoE perf / nightly!") == "moe-perf-nightly"
    assert len(folder_uid("x" * 100)) == 40


def test_the_cli_reports_a_bad_url_on_stderr_and_exits_2(capsys):
    from moeperf.cli import main

    assert main(["dashboards", "publish", "--url", "ftp://grafana.test"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "error: the Grafana URL must be http:// or https://" in err
