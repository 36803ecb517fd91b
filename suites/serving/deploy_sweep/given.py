"""A deployment sweep arm the user runs (``deploy_sweep.urls``): probed and loaded, never
started or stopped by the sweep, so it has no start-up time and no stop check, and no
process of the sweep's to watch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from moeperf.suites.serving.preflight import TargetCheck, TargetUnreachable, check_target


class GivenServer:
    """An already running server at ``url``, checked once it is visited."""

    pid = None  # not a process of the sweep's

    def __init__(self, url: str, get: Callable[[str, float], Any]):
        self.url = url
        self._get = get
        self.check: TargetCheck = check_target(url, get)  # TargetUnreachable: not up

    @property
    def alive(self) -> bool:
        """Whether it still answers its model list (its process is not the sweep's)."""
        try:
            check_target(self.url, self._get, timeout_s=5.0)
        except TargetUnreachable:
            return False
        return True

    def close(self) -> None:
        """Nothing: the sweep did not start it."""
