"""The synthetic OpenAI-compatible server: known latencies, recorded ground truth.

Each generation request (``generation.py``) is planned up front (``plan.py``), waits for
a stream slot when ``max_concurrent_streams`` are already being answered (``slots.py``),
then every token chunk is written (``paced_response.py``) at an absolute deadline,
``dequeued + ttft + inter-chunk delays`` (dequeued = received when it did not wait), so a
late chunk (event-loop lag) does not push back the ones after it. The clock is read right
before each write hands the bytes to the socket and kept per response id
(``ground_truth.py``) for clients to compare with.

Where the stream differs from vLLM's (role chunk, usage, ``[DONE]``, strict fields) is the
config's ``WireVariant``; its ``shape`` of each response is followed in
``paced_response.py`` and ``openai_format.py``. The role chunk carries no token, so it is
not in the ground truth.

Endpoints: POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health,
POST /tokenize, GET /metrics, GET /ground_truth/{id}, POST /ground_truth/query (the rest
but generation in ``endpoints.py``). This module assembles the app.
"""

from __future__ import annotations

import time

from aiohttp import web
from prometheus_client import CollectorRegistry

from moeperf.targets.synthetic import endpoints, generation
from moeperf.targets.synthetic.config import SyntheticConfig
from moeperf.targets.synthetic.drill import DrillWindows
from moeperf.targets.synthetic.first_bytes import FirstBytes, first_read_middleware
from moeperf.targets.synthetic.ground_truth import GroundTruthStore
from moeperf.targets.synthetic.metrics import SyntheticMetrics
from moeperf.targets.synthetic.slots import StreamSlots
from moeperf.targets.synthetic.state import STATE, ClockNs, ServerState


def build_app(
    config: SyntheticConfig,
    clock_ns: ClockNs = time.monotonic_ns,
    registry: CollectorRegistry | None = None,
) -> web.Application:
    """The aiohttp application of the synthetic server.

    ``clock_ns`` stamps the ground truth and paces the deadlines, so it must advance with
    real time (``time.monotonic_ns``, possibly offset). ``registry`` defaults to a fresh
    one per app. Run it with ``handler_cancellation=True`` (``running.py`` does), or a
    request whose client goes away while it waits for a stream slot keeps its place in the
    queue until its first write fails.
    """
    first_bytes = FirstBytes(clock_ns)
    app = web.Application(
        client_max_size=config.max_body_bytes, middlewares=[first_read_middleware(first_bytes)]
    )
    slots = StreamSlots(config.max_concurrent_streams)
    app[STATE] = ServerState(
        config=config,
        wire=config.wire_variant(),
        clock_ns=clock_ns,
        store=GroundTruthStore(config.max_records),
        slots=slots,
        metrics=SyntheticMetrics(registry if registry is not None else CollectorRegistry(), slots),
        drill=DrillWindows(clock_ns),
        first_bytes=first_bytes,
    )
    app.router.add_post("/v1/chat/completions", generation.chat_completions)
    app.router.add_post("/v1/completions", generation.completions)
    app.router.add_get("/v1/models", endpoints.models)
    app.router.add_get("/health", endpoints.health)
    app.router.add_post("/tokenize", endpoints.tokenize)
    app.router.add_get("/metrics", endpoints.metrics)
    app.router.add_get("/ground_truth/{id}", endpoints.ground_truth_one)
    app.router.add_post("/ground_truth/query", endpoints.ground_truth_query)
    if config.drill_control:
        app.router.add_post("/drill/fault", endpoints.drill_fault)
        app.router.add_get("/drill/fault", endpoints.drill_window)
    return app
