"""The synthetic server's state, as every request handler reads it from the app.

Apart from ``server.py`` so the handlers in other modules (``generation.py``,
``endpoints.py``) can reach it without importing the module that registers them.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import web

from moeperf.targets.openai_wire import WireVariant
from moeperf.targets.synthetic.config import SyntheticConfig
from moeperf.targets.synthetic.drill import DrillWindows
from moeperf.targets.synthetic.first_bytes import FirstBytes
from moeperf.targets.synthetic.ground_truth import GroundTruthStore
from moeperf.targets.synthetic.metrics import SyntheticMetrics
from moeperf.targets.synthetic.slots import StreamSlots

ClockNs = Callable[[], int]


@dataclass
class ServerState:
    """What every handler of one app shares: its config, clock, records, slots and drills."""

    config: SyntheticConfig
    wire: WireVariant
    clock_ns: ClockNs
    store: GroundTruthStore
    slots: StreamSlots
    metrics: SyntheticMetrics
    drill: DrillWindows
    # When each connection's request was first read (first_bytes.py): its received_ns.
    first_bytes: FirstBytes
    # Request index: part of the response id and of the seed of the request's draws.
    indices: itertools.count = field(default_factory=lambda: itertools.count(1))
    # The soak's planted leak (config.leak_bytes_per_request, a test switch): never freed.
    leaked: list[bytes] = field(default_factory=list)


STATE = web.AppKey("synthetic_state", ServerState)
