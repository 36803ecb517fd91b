"""ProcessSource: the RSS of a real process tree and its CPU over wall time."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from moeperf.collectors.sources.process_source import TREE_REFRESH_S, ProcessSource, tree_rss

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


def test_the_tree_is_listed_again_only_every_refresh_period() -> None:
    # Listing descendants reads every process on the host, so a child started after a
    # listing is read from the next one on (TREE_REFRESH_S later at most), not before.
    now_ns = [0]
    source = ProcessSource(os.getpid, host="here", clock_ns=lambda: now_ns[0])
    (alone,) = source.read(0, "c=1")
    child = subprocess.Popen([sys.executable, "-c", HOLD], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        now_ns[0] = int(0.5 * TREE_REFRESH_S * 1e9)
        (before,) = source.read(1, "c=1")
        assert before.rss_bytes is not None and alone.rss_bytes is not None
        assert before.rss_bytes < alone.rss_bytes + (100 << 20)  # not listed yet
        now_ns[0] = int(1.5 * TREE_REFRESH_S * 1e9)
        (after,) = source.read(2, "c=1")
        assert after.rss_bytes is not None and after.rss_bytes >= alone.rss_bytes + (190 << 20)
    finally:
        child.kill()
        child.wait()
    # A gone child is skipped until the next listing; the root's own reads go on.
    now_ns[0] = int(1.7 * TREE_REFRESH_S * 1e9)
    (gone,) = source.read(3, "c=1")
    assert gone.rss_bytes is not None and gone.rss_bytes < alone.rss_bytes + (100 << 20)
