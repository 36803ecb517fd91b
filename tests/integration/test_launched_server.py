"""The launcher of the servers moeperf starts (suites/serving/launched_server.py), on real
child processes: a start that fails gives its exit code and the end of its output with the
secrets masked, and a stop leaves no process of the server's group, even one that ignores
SIGTERM and one the server started."""

from __future__ import annotations

import sys
import time

import psutil
import pytest

from moeperf.suites.serving.launched_server import MASK, LaunchedServer, NotReady, group_alive


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_a_server_that_exits_says_its_code_and_its_output_with_secrets_masked():
    server = LaunchedServer(
        python("print('listening with key s3cret-42', flush=True); raise SystemExit(3)"),
        secrets=["s3cret-42"],
    )
    try:
        with pytest.raises(NotReady, match="exited with code 3") as info:
            server.wait_until(lambda: None, timeout_s=30, poll_s=0.05)
        assert info.value.exit_code == 3
        assert server.tail(200) == f"listening with key {MASK}"
    finally:
        server.stop()


def test_waiting_gives_the_first_answer_or_times_out():
    server = LaunchedServer(python("import time; time.sleep(60)"))
    try:
        answers = iter([None, None, "up"])
        assert server.wait_until(lambda: next(answers), timeout_s=30, poll_s=0.01) == "up"
        with pytest.raises(NotReady, match=r"did not answer within 0\.2 s") as info:
            server.wait_until(lambda: None, timeout_s=0.2, poll_s=0.05)
        assert info.value.exit_code is None and server.alive
    finally:
        server.stop()
    assert not server.alive


def test_the_stop_takes_the_whole_group_past_a_server_that_ignores_sigterm():
    # The server starts a worker of its own (as vLLM starts its engine core), and both
    # ignore SIGTERM: the grace runs out and SIGKILL takes the group.
    code = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "subprocess.Popen([sys.executable, '-c', 'import signal, time; "
        "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)'])\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    server = LaunchedServer(python(code))
    server.wait_until(lambda: True if "ready" in server.tail(100) else None, 30, 0.05)
    deadline = time.monotonic() + 10
    while len(psutil.Process(server.pid).children()) < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    (worker,) = psutil.Process(server.pid).children()
    began = time.monotonic()
    server.stop(grace_s=0.5)
    assert time.monotonic() - began < 5
    assert not group_alive(server.pgid) and not server.alive
    assert not worker.is_running()  # killed, and reaped
