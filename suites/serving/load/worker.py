"""A load worker: one process, one uvloop event loop, its share of every level.

The parent sends a ``LevelPlan`` per level on ``commands`` (None ends the worker); the
worker puts ("finished", status) as each request ends (for progress), ("health",
index, scenario, in_flight, loop_lag_p99_s, cpu_ratio) every HEALTH_INTERVAL_S, ("record",
RequestRecord) as each request ends, ("amended", RequestRecord) after the level when
client-side token counts are added to a record already sent, ("level_done", index,
WorkerSummary) at the end of each level on ``results``; ("failed", index, traceback) if it
breaks. Setting ``stop`` ends the current level at once: requests in flight are
cancelled and recorded as such. Each level is run by level.py's ``LevelRunner`` (where
HEALTH_INTERVAL_S is); this module is the process around it.
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import threading
import traceback
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

import aiohttp

from moeperf.suites.serving.load import eager_write
from moeperf.suites.serving.load.amend import finish_deferred
from moeperf.suites.serving.load.level import LevelRunner
from moeperf.suites.serving.load.messages import Failed, LevelDone, Ready
from moeperf.suites.serving.load.orphan import exit_when_orphaned
from moeperf.suites.serving.load.plan import WorkerConfig
from moeperf.suites.serving.workload.tokenizer import (
    resolve_tokenizer,
)


def worker_main(
    index: int,
    config: WorkerConfig,
    commands: Any,
    results: Any,
    stop: Any,
    drops: Any = None,
    environ: Mapping[str, str] | None = None,
    ends: Any = None,
) -> None:
    """Process entry point. ``drops``: a shared counter; each time the parent raises it the
    worker drops its connection pool (a drill's ``drop_pool`` fault). ``environ``: the
    parent's environment when it started the worker (pool.py). ``ends``: a shared counter;
    raised, it ends the running level at once, as ``stop`` does, and the run goes on
    (load.stop_over_saturated)."""
    if environ is not None:
        # A forkserver's child starts with the server's environment, taken when the server
        # started; the libraries here read the one the harness has now, as under spawn.
        os.environ.clear()
        os.environ.update(environ)
    # Ctrl-C reaches the whole process group; the parent decides how a run ends and tells
    # workers through ``stop``, so that requests in flight are recorded as cancelled.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=exit_when_orphaned, name="orphan-watch", daemon=True).start()
    runner: Callable[[Coroutine[Any, Any, None]], None]
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # uvloop does not exist on Windows
        runner = asyncio.run
    try:
        runner(_serve(index, config, commands, results, stop, drops, ends))
    except Exception:
        # Shown to the user: an exception's text may hold what a server echoed.
        results.put(Failed(index, config.headers.redact(traceback.format_exc())))


async def _serve(
    index: int,
    config: WorkerConfig,
    commands: Any,
    results: Any,
    stop: Any,
    drops: Any,
    ends: Any = None,
) -> None:
    loop = asyncio.get_running_loop()
    eager_write.install(loop)  # each request's bytes leave in its own loop pass (3.11)
    timeout = aiohttp.ClientTimeout(
        total=config.request_timeout_s, sock_read=config.stall_timeout_s
    )

    def new_session(*traces: aiohttp.TraceConfig) -> aiohttp.ClientSession:
        # No pool limit: the load model, not the connector, decides how many are in
        # flight. The spec's headers (an API key among them) go with every request.
        return aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, force_close=False),
            timeout=timeout,
            headers=config.headers.values,
            trace_configs=list(traces) or None,
        )

    # The tokenizer's /tokenize calls have their own session: a dropped load pool
    # (a drill) leaves the token counts after the level alone.
    async with new_session() as session:
        tokenizer = resolve_tokenizer(config.tokenizer, config.base_url, session)
        level = LevelRunner(index, config, new_session, results, stop, drops, ends)
        results.put(Ready(index))
        try:
            while True:
                plan = await loop.run_in_executor(None, commands.get)
                if plan is None:
                    return
                _settle_heap()
                report = await level.run(plan)
                # A stopped run ends promptly: its records are stored without client counts.
                counter = None if stop.is_set() else tokenizer
                await finish_deferred(level.deferred, counter, results)
                results.put(LevelDone(index, report))
        finally:
            level.deferred.close()
            await level.session.close()


def _settle_heap() -> None:
    """Collect now and freeze what survives, off the clock: a plan arrives
    ``WorkerPool.start_delay_s`` (0.3 s) before its level starts, and a full collection
    takes some 30-40 ms here. The level's own collections then never walk the worker's
    imports, sessions and earlier levels: one that did stalled the loop 29-44 ms in the
    middle of a 64-stream level, and every chunk in flight waited as long. (A stall that
    rare leaves the loop-lag p99 as it was: 1.4-2.0 ms in 5 calibrations with the freeze and
    5 without, interleaved.) Unfrozen first, so that what the last level left in cycles is
    collected here."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
