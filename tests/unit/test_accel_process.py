"""ProcessSource: the RSS of a real process tree and its CPU over wall time."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from moeperf.collectors.sources.process_source import ProcessSource, tree_rss

# A child that holds 200 MB resident (written to, so the pages are really there).
HOLD = (
    "import sys, time; b = bytearray(200 << 20); b[::4096] = b'x' * len(b[::4096]); "
    "print('ready', flush=True); time.sleep(60)"
)


@pytest.mark.timing
def test_the_tree_holds_the_childs_memory_and_the_cpu_is_over_wall_time() -> None:
    child = subprocess.Popen([sys.executable, "-c", HOLD], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        source = ProcessSource(os.getpid, host="here")
        (first,) = source.read(1, "c=1")
        own_rss = psutil.Process().memory_info().rss
        assert first.source == "process" and first.device == f"pid:{os.getpid()}"
        assert first.host == "here" and first.scenario == "c=1" and first.t_ns == 1
        assert first.rss_bytes is not None and first.rss_bytes >= own_rss + (190 << 20)
        assert first.cpu_ratio is None  # no interval yet
        assert first.power_w is None and first.utilization_ratio is None
        # Busy on this thread for 0.3 s, the child asleep: about one core (less when the
        # machine is shared, never several).
        end = time.perf_counter() + 0.3
        while time.perf_counter() < end:
            pass
        (second,) = source.read(2, "c=1")
        assert second.cpu_ratio is not None and 0.2 < second.cpu_ratio < 1.5
    finally:
        child.kill()
        child.wait()


def test_a_gone_process_raises_for_the_sampler_to_count() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    with pytest.raises(ProcessLookupError, match=str(child.pid)):
        ProcessSource(lambda: child.pid).read(0, "")
    assert tree_rss(child.pid) is None


def test_tree_rss_counts_the_processes() -> None:
    read = tree_rss(os.getpid())
    assert read is not None and read[0] > 0 and read[1] >= 1
