"""The processes a ``moeperf`` subprocess started, found and checked by pid with psutil: did
any outlive it?"""

from __future__ import annotations

import time

import psutil


def children(pid: int) -> list[psutil.Process]:
    """Every process below ``pid`` now (none once it is gone)."""
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def alive(process: psutil.Process) -> bool:
    """Running and not a zombie (an exited child its parent has not reaped yet)."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def cmdline(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return ""


def survivors(processes: list[psutil.Process], grace_s: float = 5.0) -> list[str]:
    """ "PID: command" of each process still alive after up to ``grace_s`` (exits take a
    moment to be reaped)."""
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(alive(p) for p in processes):
        time.sleep(0.1)
    return [f"{p.pid}: {cmdline(p)}" for p in processes if alive(p)]
