"""The embedded target's lifecycle: started on loopback, never left behind."""

import signal
import subprocess
import sys

import psutil
import pytest

from moeperf.suites.errors import TargetError
from moeperf.suites.serving.embedded.process import running_target

pytestmark = pytest.mark.slow

_HOLDER = """
import sys, time
from moeperf.suites.serving.embedded.process import running_target
with running_target("moeperf.targets.synthetic", {}) as url:
    print(url, flush=True)
    time.sleep(60)
"""


def _synthetic_children(pid: int) -> list[psutil.Process]:
    return [
        p
        for p in psutil.Process(pid).children(recursive=True)
        if "moeperf.targets.synthetic" in " ".join(p.cmdline())
    ]


def test_target_is_stopped_when_the_block_ends():
    with running_target("moeperf.targets.synthetic", {"ttft_s": 0.01}) as url:
        assert url.startswith("http://127.0.0.1:")
        children = _synthetic_children(psutil.Process().pid)
        assert len(children) == 1
    psutil.wait_procs(children, timeout=10)
    assert not children[0].is_running()


def test_target_exits_by_itself_when_its_parent_is_killed():
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None  # stdout=PIPE
    try:
        assert holder.stdout.readline().startswith("http://127.0.0.1:")
        (target,) = _synthetic_children(holder.pid)
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        gone, _ = psutil.wait_procs([target], timeout=10)
        assert gone, "the synthetic target outlived the process that started it"
    finally:
        holder.kill()


def test_bad_config_is_a_target_error_with_the_reason():
    with (
        pytest.raises(TargetError, match="ttft_s"),
        running_target("moeperf.targets.synthetic", {"ttft_s": -1}),
    ):
        pass
