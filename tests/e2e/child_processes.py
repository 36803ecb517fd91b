"""The processes a ``moeperf`` subprocess started, found and checked by pid with psutil: did
any outlive it?"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

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


def interrupted(
    argv: list[str],
    cwd: Path,
    env: dict[str, str],
    out: Path,
    under_way: Callable[[subprocess.Popen[bytes]], bool],
    timeout_s: float = 120.0,
) -> tuple[int, list[psutil.Process], list[str]]:
    """Start ``argv`` (its output to ``out``), send it SIGINT (Ctrl-C) once ``under_way``
    says so, and wait for it: (its exit code, the processes below it just before the
    SIGINT, their command lines then). Whatever is left is killed on the way out, so a
    failing test leaves nothing."""
    with open(out, "w") as sink:
        process = subprocess.Popen(argv, cwd=cwd, env=env, stdout=sink, stderr=subprocess.STDOUT)
    started: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and process.poll() is None and not under_way(process):
            time.sleep(0.2)
        assert process.poll() is None, out.read_text()[-3000:]
        started = children(process.pid)
        lines = [cmdline(p) for p in started]
        process.send_signal(signal.SIGINT)
        return process.wait(timeout=90), started, lines
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for child in started:
            if alive(child):
                child.kill()
