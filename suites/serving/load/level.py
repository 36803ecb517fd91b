"""One load worker's levels: pacing the requests of each (a closed loop of slots or
conversations, or an open loop of arrivals), sending and recording each one, reporting the
worker's health, and stopping or dropping the connection pool when the parent says so.

Apart from worker.py, the process around it (its entry point and command loop), so the
per-request path reads on its own; the sends through the connect backoff are in
backoff_send.py.
"""

from __future__ import annotations

import asyncio
import bisect
import functools
import itertools
import random
import time
import weakref
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp

from moeperf.collectors.records import RequestRecord
from moeperf.collectors.serving_records import WorkerSummary
from moeperf.suites.serving.load.backoff import ConnectBackoff
from moeperf.suites.serving.load.backoff_send import BackoffSender
from moeperf.suites.serving.load.client import StreamResult, stream_request
from moeperf.suites.serving.load.deferred import DeferredSpool
from moeperf.suites.serving.load.engine import WorkerHealth
from moeperf.suites.serving.load.messages import Finished, Health, Record
from moeperf.suites.serving.load.openai_api import ENDPOINTS
from moeperf.suites.serving.load.plan import LevelPlan, WorkerConfig
from moeperf.suites.serving.load.request_of import body_of, new_record
from moeperf.suites.serving.load.selfwatch import SelfWatch
from moeperf.suites.serving.workload.sources import Prompt

_STOP_POLL_S = 0.05
# Sends later than this after their intended time count as late (uvloop timers are 1 ms).
LATE_SEND_S = 0.002
HEALTH_INTERVAL_S = 0.5
_SPIN_NS = 1_500_000


class LevelRunner:
    """Runs levels for one worker; keeps the per-run state (prompt cycle, counters)."""

    def __init__(
        self,
        index: int,
        config: WorkerConfig,
        new_session: Callable[..., aiohttp.ClientSession],
        results: Any,
        stop: Any,
        drops: Any = None,
        ends: Any = None,
    ):
        self.index = index
        self.config = config
        # The responses whose bodies may still be read, for a dropped pool to close.
        self._answered: weakref.WeakSet[aiohttp.ClientResponse] = weakref.WeakSet()
        trace = aiohttp.TraceConfig()
        trace.on_request_end.append(self._note_answer)
        self._new_session = functools.partial(new_session, trace)
        self.session = self._new_session()
        self.results = results
        self.stop = stop
        self.drops = drops
        self._drops_seen = drops.value if drops is not None else 0
        # Raised by the parent to end the running level early (WorkerPool.end_level).
        self.ends = ends
        self._ends_seen = 0
        self.url = config.base_url.rstrip("/") + ENDPOINTS[config.api]
        self.deferred = DeferredSpool()
        self._sequence = itertools.count()
        self._talks = itertools.count()  # conversation ids
        # Client-side token counts need every chunk's text, and a tokenizer.
        self._keep_texts = bool(config.tokenizer)
        self._slots: list[asyncio.Task] = []
        # Kept across levels: a target that is down stays backed off until it answers.
        self._sender = BackoffSender(ConnectBackoff(random.Random(index)), self._stream)
        # One cycle of positions per slice of the prompts, kept across levels (see run).
        self._cycles: dict[tuple[int, int], Iterator[int]] = {}
        self._positions: Iterator[int] | None = None  # the running level's cycle
        self._first: int | None = None  # the position of the level's first prompt

    async def run(self, plan: LevelPlan) -> WorkerSummary:
        # A level starts at its offset in the slice, or (``resume_prompts``, after the
        # worker's first level of the slice) where the last one stopped, so a level never
        # replays the prompts the level before it just sent (a target with prefix caching
        # would serve those from its cache).
        pool = (plan.prompt_start, plan.prompt_count)
        if pool not in self._cycles or not plan.resume_prompts:
            size = plan.prompt_count or len(self.config.prompts)
            self._cycles[pool] = itertools.islice(
                itertools.cycle(range(size)), plan.prompt_offset, None
            )
        self._positions = self._cycles[pool]
        self._first = None
        self._late = 0
        self._sent = 0
        watch = SelfWatch()
        watch.start()
        self._ends_seen = self.ends.value if self.ends is not None else 0
        await _sleep_until(plan.start_ns)
        in_flight: set[asyncio.Task] = set()
        sender = asyncio.create_task(
            self._closed_loop(plan, in_flight)
            if plan.mode == "concurrency"
            else self._open_loop(plan, in_flight)
        )
        stopper = asyncio.create_task(self._watch_stop())
        health = asyncio.create_task(self._report_health(plan.scenario, watch, in_flight))
        await asyncio.wait({sender, stopper}, return_when=asyncio.FIRST_COMPLETED)
        stopped_ns = None
        if stopper.done():  # stopped from outside: end at once
            stopped_ns = time.monotonic_ns()
            sender.cancel()
            await asyncio.gather(sender, return_exceptions=True)
            drain_s = 0.0
        else:
            drain_s = plan.drain_timeout_s
        for task in list(self._sender.held):  # the window is over and they were never sent
            task.cancel()
        if in_flight:
            _, pending = await asyncio.wait(in_flight, timeout=drain_s)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        stopper.cancel()
        health.cancel()
        for slot in self._slots:
            slot.cancel()
        await asyncio.gather(*self._slots, return_exceptions=True)
        self._slots = []
        offered = self._sent
        if plan.mode != "concurrency":  # the arrivals due before the level ended
            due_s = (stopped_ns - plan.start_ns) / 1e9 if stopped_ns else float("inf")
            offered = bisect.bisect_right(plan.arrivals_s, due_s)
        return WorkerSummary(
            self.index, plan.scenario, offered, self._sent, self._late, await watch.stop(),
            self._first,
        )  # fmt: skip

    async def _report_health(self, scenario: str, watch: SelfWatch, in_flight: set) -> None:
        # For live export only: a few small messages a second, off the per-chunk path.
        while True:
            await asyncio.sleep(HEALTH_INTERVAL_S)
            lag_p99_s, cpu_ratio = watch.recent()
            health = WorkerHealth(self.index, scenario, len(in_flight), lag_p99_s, cpu_ratio)
            self.results.put(Health(health))

    async def _watch_stop(self) -> None:
        while not self.stop.is_set():
            if self.ends is not None and self.ends.value != self._ends_seen:
                return  # this level ended early; the run goes on
            await asyncio.sleep(_STOP_POLL_S)
            if self.drops is not None and self.drops.value != self._drops_seen:
                self._drops_seen = self.drops.value
                await self._drop_pool()

    async def _note_answer(self, _session: Any, _context: Any, params: Any) -> None:
        self._answered.add(params.response)

    async def _drop_pool(self) -> None:
        """A drill's ``drop_pool``: every connection of this worker's pool closed under
        the requests reading from them (they fail: "Connection closed"), and a new pool
        for the requests after. (Closing the session alone leaves a body being read
        waiting for its timeout.)"""
        old, self.session = self.session, self._new_session()
        for response in list(self._answered):
            response.close()
        await old.close()

    async def _closed_loop(self, plan: LevelPlan, in_flight: set) -> None:
        end_ns = plan.start_ns + int(plan.duration_s * 1e9)
        budget = itertools.count() if plan.max_requests is None else iter(range(plan.max_requests))

        async def stream_slot() -> None:
            # Each slot sends its next request the moment the previous one ends, from its
            # own task: a new task per request would start only on the loop's next pass,
            # behind every other stream's ready chunks, and that wait would be the send
            # side's (docs/concepts/calibration.md). In flight while it is in a request.
            slot = asyncio.current_task()
            assert slot is not None
            while time.monotonic_ns() < end_ns and next(budget, None) is not None:
                in_flight.add(slot)
                try:
                    await self._one(plan, time.monotonic_ns())
                finally:
                    in_flight.discard(slot)

        async def conversation_slot() -> None:
            # One conversation after another: each turn sends the history so far, the
            # moment the think time after the previous reply has passed.
            turns, think_s = self.config.conversation_turns, self.config.think_time_s
            slot = asyncio.current_task()  # in flight while in a turn, as stream_slot
            assert slot is not None
            while time.monotonic_ns() < end_ns:
                conversation = f"{self.config.request_id_prefix}w{self.index}-c{next(self._talks)}"
                history: list[dict[str, str]] = []
                for turn in range(1, turns + 1):
                    if time.monotonic_ns() >= end_ns or next(budget, None) is None:
                        return
                    turn_of = _Turn(conversation, turn, history)
                    in_flight.add(slot)
                    try:
                        reply = await self._one(plan, time.monotonic_ns(), turn_of)
                    finally:
                        in_flight.discard(slot)
                    if reply is None:  # the turn failed: the conversation cannot go on
                        break
                    if turn < turns and think_s > 0:
                        await asyncio.sleep(think_s)

        slot = conversation_slot if self.config.conversation_turns else stream_slot
        firsts_ns = [plan.start_ns + int(s * 1e9) for s in plan.first_sends_s]
        self._slots = [
            asyncio.create_task(_after(firsts_ns[k], slot) if firsts_ns else slot())
            for k in range(plan.concurrency)
        ]
        # Returns at the end of the window, or earlier when the request budget is spent;
        # requests still in flight are left to the drain in run().
        await asyncio.wait(self._slots, timeout=max(0.0, (end_ns - time.monotonic_ns()) / 1e9))

    async def _open_loop(self, plan: LevelPlan, in_flight: set) -> None:
        limit = asyncio.Semaphore(plan.concurrency) if plan.concurrency > 0 else None
        end_ns = plan.start_ns + int(plan.duration_s * 1e9)
        prompts = self.config.prompts
        for k, offset_s in enumerate(plan.arrivals_s):
            intended_abs_ns = plan.start_ns + int(offset_s * 1e9)
            await _sleep_until(intended_abs_ns)
            if limit is not None:
                await limit.acquire()
            if time.monotonic_ns() >= end_ns:
                # Behind schedule past the window: what is left was offered, never sent.
                if limit is not None:
                    limit.release()
                return
            # A trace's arrival k has its own prompt; otherwise the level's cycle.
            prompt = prompts[plan.prompt_indices[k]] if plan.prompt_indices else None
            task = asyncio.create_task(self._one(plan, intended_abs_ns, prompt=prompt))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
            if limit is not None:
                task.add_done_callback(lambda _t: limit.release())

    async def _one(
        self,
        plan: LevelPlan,
        intended_abs_ns: int,
        turn: _Turn | None = None,
        prompt: Prompt | None = None,
    ) -> str | None:
        """Send one request and record it; the reply's text when it ended ok (a
        conversation's next turn needs it), else None."""
        config = self.config
        if prompt is None:  # the level's next prompt (a trace's request brings its own)
            assert self._positions is not None  # set by run() before any request
            position = next(self._positions)
            if self._first is None:
                self._first = position
            prompt = config.prompts[plan.prompt_start + position]
        messages = None
        if turn is not None:
            messages = [*turn.history, {"role": "user", "content": prompt.text}]
        request_id = f"{self.config.request_id_prefix}w{self.index}-{next(self._sequence)}"
        record = new_record(request_id, plan, self.index, intended_abs_ns, config.anchor_ns, prompt)
        if turn is not None:
            record.conversation, record.turn = turn.conversation, turn.turn
            if (
                turn.turn > 1
            ):  # a later turn's prompt is the whole history: its count is the server's
                record.client_prompt_tokens = None
        body = body_of(config, prompt, messages)
        self._sent += 1
        try:
            result = await self._sender.send(body, record)
        except asyncio.CancelledError:
            if record.send_ns == 0:  # cancelled while backing off: it never left
                record.send_ns = record.done_ns = time.monotonic_ns() - config.anchor_ns
                record.error_message = (
                    "cancelled before sending, while backing off from connect errors"
                )
            self.results.put(Finished(record.status))
            self.results.put(Record(record))
            raise
        if record.send_ns - record.intended_send_ns > LATE_SEND_S * 1e9:
            self._late += 1
        self.results.put(Finished(record.status))
        # Stored at once; amended after the level if a tokenizer adds counts (off the
        # timing path), so a crash loses nothing already measured.
        self.results.put(Record(record))
        if self._keep_texts:
            self.deferred.add(result)
        if record.status != "ok":
            return None
        if turn is not None and messages is not None:
            reply = "".join(result.texts)
            turn.history[:] = [*messages, {"role": "assistant", "content": reply}]
            return reply
        return ""

    async def _stream(
        self,
        body: dict[str, Any],
        record: RequestRecord,
        on_answer: Callable[[], None] = lambda: None,
    ) -> StreamResult:
        if self.config.planted_send_delay_s:
            # Calibration's self-check: a delay of the client's own before the send,
            # which calibrate must attribute to the send side.
            await asyncio.sleep(self.config.planted_send_delay_s)
        return await stream_request(
            self.session,
            self.url,
            self.config.api,
            body,
            record,
            time.monotonic_ns,
            self.config.anchor_ns,
            on_answer,
            secrets=self.config.headers.secrets,
        )


@dataclass(slots=True)
class _Turn:
    """One turn of a conversation: its id, the turn number (from 1), and the messages
    so far (the request appends its user message and the reply once it ended ok)."""

    conversation: str
    turn: int
    history: list[dict[str, str]]


async def _after(start_ns: int, slot: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """A stream that starts at ``start_ns`` (a ramp, load.ramp_s). Its coroutine is made
    only then: a level stopped during the ramp leaves none never awaited."""
    if start_ns > time.monotonic_ns():
        await _sleep_until(start_ns)
    await slot()


async def _sleep_until(deadline_ns: int) -> None:
    # uvloop's timers have millisecond resolution and may fire up to ~1 ms early; a send
    # must never precede its intended time, so sleep to within _SPIN_NS of it, then yield
    # to the loop (other streams keep being served) until it has passed.
    while (remaining_ns := deadline_ns - time.monotonic_ns()) > 0:
        await asyncio.sleep(max(0, remaining_ns - _SPIN_NS) / 1e9)
