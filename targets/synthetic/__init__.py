"""The ground-truth synthetic target: an OpenAI-compatible server with known latencies.

Used to measure a benchmark client's own measurement error: the server records when it
wrote each chunk (``GET /ground_truth/{id}``), on the host's monotonic clock.

The server's names are imported on first use: a spec that only validates its synthetic
section (``moeperf.targets.synthetic.config``) does not load aiohttp and the server.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from moeperf.targets.synthetic.config import SyntheticConfig, SyntheticConfigError

if TYPE_CHECKING:
    from moeperf.targets.synthetic.running import RunningServer, serve, start
    from moeperf.targets.synthetic.server import build_app

_LAZY = {"RunningServer": "running", "serve": "running", "start": "running", "build_app": "server"}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)


__all__ = [
    "RunningServer",
    "SyntheticConfig",
    "SyntheticConfigError",
    "build_app",
    "serve",
    "start",
]
