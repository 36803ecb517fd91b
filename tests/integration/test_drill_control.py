"""What a drill does to a target, seen by a real client over loopback: the synthetic
target's fault windows (only when started for a drill), and the harness's hold on an
embedded target's process (kill, restart on the same port, pause, resume)."""

from __future__ import annotations

import errno
import http.client
import json
import time
from urllib.parse import urlsplit

import pytest

from moeperf.suites.serving.embedded.process import embedded_target

CHAT = {
    "model": "synthetic",
    "messages": [{"role": "user", "content": "hello there"}],
    "max_tokens": 8,
    "stream": True,
}
FAST = {"ttft_s": 0.01, "itl_s": 0.001}


def _post(url: str, path: str, body: dict, timeout_s: float = 5.0):
    parts = urlsplit(url)
    assert parts.hostname is not None
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout_s)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        reply = conn.getresponse()
        return reply.status, dict(reply.getheaders()), reply.read()
    finally:
        conn.close()


def _window(url: str) -> dict:
    """``GET /drill/fault``: the last window's kind, open or not, and requests caught."""
    parts = urlsplit(url)
    assert parts.hostname is not None
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=5.0)
    try:
        conn.request("GET", "/drill/fault")
        reply = conn.getresponse()
        assert reply.status == 200
        return json.loads(reply.read())
    finally:
        conn.close()


def _is_json(event: bytes) -> bool:
    try:
        json.loads(event)
    except ValueError:
        return False
    return True


def _events(body: bytes) -> list[bytes]:
    return [e[len(b"data: ") :] for e in body.split(b"\n\n") if e]


def test_without_drill_control_there_is_no_fault_route():
    with embedded_target("moeperf.targets.synthetic", FAST) as target:
        status, _, _ = _post(target.url, "/drill/fault", {"kind": "reset", "for_s": 1})
        assert status == 404
        status, _, body = _post(target.url, "/v1/chat/completions", CHAT)
        assert status == 200 and _events(body)[-1] == b"[DONE]"


def test_windows_fail_every_request_while_open_and_none_after():
    with embedded_target("moeperf.targets.synthetic", {**FAST, "drill_control": True}) as target:
        url = target.url
        assert _window(url) == {"kind": None, "open": False, "requests_hit": 0}
        assert (
            _post(url, "/drill/fault", {"kind": "http_error", "for_s": 0.5, "status": 429})[0]
            == 200
        )
        status, headers, body = _post(url, "/v1/chat/completions", CHAT)
        assert status == 429 and headers.get("Retry-After") == "1"
        assert json.loads(body)["error"]["code"] == 429
        assert _window(url)["requests_hit"] == 1
        time.sleep(0.6)
        assert _post(url, "/v1/chat/completions", CHAT)[0] == 200
        # The request after the window is not counted: only those it caught.
        assert _window(url) == {"kind": "http_error", "open": False, "requests_hit": 1}

        _post(url, "/drill/fault", {"kind": "reset", "for_s": 0.5})
        with pytest.raises(ConnectionResetError) as reset:
            _post(url, "/v1/chat/completions", CHAT)
        assert reset.value.errno == errno.ECONNRESET
        with pytest.raises(ConnectionResetError):
            _post(url, "/v1/chat/completions", CHAT)
        time.sleep(0.6)
        assert _post(url, "/v1/chat/completions", CHAT)[0] == 200
        # A new window counts from 0.
        assert _window(url) == {"kind": "reset", "open": False, "requests_hit": 2}

        _post(url, "/drill/fault", {"kind": "malformed", "for_s": 0.5})
        status, _, body = _post(url, "/v1/chat/completions", CHAT)
        bad = [e for e in _events(body) if e != b"[DONE]" and not _is_json(e)]
        assert status == 200 and len(bad) == 1
        time.sleep(0.6)
        status, _, body = _post(url, "/v1/chat/completions", CHAT)
        assert all(e == b"[DONE]" or _is_json(e) for e in _events(body))
        assert _window(url) == {"kind": "malformed", "open": False, "requests_hit": 1}


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"kind": "explode", "for_s": 1}, "'kind' must be one of http_error, reset, malformed"),
        ({"kind": "reset", "for_s": 0}, "'for_s' must be in"),
        ({"kind": "reset"}, "'for_s' must be a number"),
        ({"kind": "http_error", "for_s": 1, "status": 200}, "'status' must be one of"),
    ],
)
def test_a_bad_window_is_a_400_naming_the_field(body, named):
    with embedded_target("moeperf.targets.synthetic", {**FAST, "drill_control": True}) as target:
        status, _, answer = _post(target.url, "/drill/fault", body)
        assert status == 400
        assert named in json.loads(answer)["error"]["message"]


def test_a_killed_target_restarts_on_its_port_and_a_paused_one_stops_answering():
    with embedded_target("moeperf.targets.synthetic", FAST) as target:
        url, first_pid = target.url, target.pid
        target.kill()
        assert not target.alive
        with pytest.raises(ConnectionRefusedError):
            _post(url, "/v1/chat/completions", CHAT)
        target.restart()
        assert target.url == url and target.pid != first_pid and target.restarts == 1
        assert _post(url, "/v1/chat/completions", CHAT)[0] == 200

        target.pause()
        with pytest.raises(TimeoutError):  # accepted by the kernel, answered by no one
            _post(url, "/v1/chat/completions", CHAT, timeout_s=0.5)
        target.resume()
        assert _post(url, "/v1/chat/completions", CHAT)[0] == 200
