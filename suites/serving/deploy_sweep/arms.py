"""A deployment sweep's arms: their names, their specs, the order they run in, and the check
that each stopped cleanly."""

from __future__ import annotations

import socket
from typing import Protocol
from urllib.parse import urlsplit

from moeperf.suites.serving.mode_spec import GridValue
from moeperf.suites.serving.spec import ServingSpec


def arm_label(knobs: dict[str, GridValue]) -> str:
    """ "threads=1 max_running_requests=8": the arm's knobs, in the grid's order."""
    return " ".join(f"{name}={value}" for name, value in knobs.items())


def arm_spec(spec: ServingSpec, knobs: dict[str, GridValue]) -> ServingSpec:
    """``spec`` with the arm's knobs over its own [target.reference]."""
    target = spec.target.model_copy(update={"reference": {**spec.target.reference, **knobs}})
    return spec.model_copy(update={"target": target})


def interleaved(arms: int, repeats: int) -> list[tuple[int, int]]:
    """(arm, repeat) in run order: A B C, then C B A, then A B C ... (repeats 1-based), so
    drift over the sweep's time falls on every arm alike."""
    order = []
    for repeat in range(1, repeats + 1):
        indices = range(arms) if repeat % 2 else range(arms - 1, -1, -1)
        order += [(arm, repeat) for arm in indices]
    return order


def scenario_of(label: str, streams: int, repeat: int, repeats: int) -> str:
    """ "threads=1 c=4", with " #2" for the second repeat when an arm runs more than once."""
    return f"{label} c={streams}" + (f" #{repeat}" if repeats > 1 else "")


def port_free(port: int) -> bool:
    """Whether a server could listen on 127.0.0.1:``port`` now (SO_REUSEADDR, as servers
    bind: a closed connection's TIME_WAIT does not count, a listener does)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class ArmProcess(Protocol):
    """What the stop check reads of an arm's target: the embedded one, or a command's."""

    @property
    def url(self) -> str: ...
    @property
    def pid(self) -> int: ...
    @property
    def alive(self) -> bool: ...


def stop_check(target: ArmProcess) -> str:
    """After a stop: "stopped", or what is left (its process, its port)."""
    left = []
    if target.alive:
        left.append(f"process {target.pid} still running")
    port = urlsplit(target.url).port
    if port is not None and not port_free(port):
        left.append(f"port {port} still taken")
    return "stopped" if not left else "; ".join(left)
