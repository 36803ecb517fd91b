"""``[locust]``: how the Locust engine (``load.engine = "locust"``) is laid out.

Local workers are ``load.workers`` processes on this host; ``remote_workers`` more are
expected to connect from other machines (``moeperf locust-worker --master-host H
--master-port P`` there) to the master at ``bind``:``port``, which then must be an
address they can reach. The web UI, when asked, listens on 127.0.0.1 unless
``ui_host`` says otherwise: it can start and stop load, so it is never put on a network
by default.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from moeperf.suites.spec_base import Positive, Strict


class LocustSpec(Strict):
    # Workers expected to connect from other machines, beside the load.workers local ones.
    remote_workers: Annotated[int, Field(ge=0)] = 0
    # The address the Locust master listens on for its workers.
    bind: str = "127.0.0.1"
    # The port the master listens on for its workers; 0 with remote workers: 5557.
    port: Annotated[int, Field(ge=0, le=65535)] = 0  # 0: a free one (local workers only)
    # How long the master waits for all its workers to connect before the run fails.
    connect_timeout_s: Positive = 120.0
    # Start Locust's web UI (it can start and stop load).
    ui: bool = False
    # The address the web UI listens on.
    ui_host: str = "127.0.0.1"
    # The port the web UI listens on.
    ui_port: Annotated[int, Field(ge=1, le=65535)] = 8089
