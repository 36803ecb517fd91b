"""What the harness, the Locust master and its workers say to each other.

Harness <-> master: one JSON object per line on the master's stdin and stdout.
Master <-> workers: Locust's custom messages (msgpack over ZeroMQ). Objects of the run
(the WorkerConfig, a LevelPlan) travel pickled, base64 in a string: a worker runs what
its master sends, as a Locust worker runs its master's test, so start workers only
against a master you started.
"""

from __future__ import annotations

import base64
import pickle
from typing import Any

# Master -> workers.
PING = "moeperf_ping"  # {"t0": master ns}: answered at once with PONG
CONFIG = "moeperf_config"  # {"run": pickled WorkerRun fields}
LEVEL = "moeperf_level"  # {"plan": pickled LevelPlan}: this worker's share
STOP = "moeperf_stop"  # the run was stopped: cancel what is in flight
# Workers -> master.
PONG = "moeperf_pong"  # {"t0": master ns, "t1": worker ns, "host": hostname}
CONFIGURED = "moeperf_configured"  # {}
RECORDS = "moeperf_records"  # {"records": [RequestRecord dicts]}
LEVEL_DONE = "moeperf_level_done"  # {"summary": pickled WorkerSummary}


def packed(value: Any) -> str:
    return base64.b64encode(pickle.dumps(value)).decode("ascii")


def unpacked(text: str) -> Any:
    return pickle.loads(base64.b64decode(text))  # from our own master: see above
