"""One Locust worker's share of a load level, with the asyncio engine's semantics: its
users send closed loop from ``start_ns`` until the window ends or its share of the
request budget is spent; what is still in flight then gets ``drain_timeout_s`` and is
cancelled after; every request sent is recorded once, cancelled ones included.

Times: the level's plan arrives on the master's clock (the harness's: the master runs on
its host); ``offset_ns`` (this worker's clock minus the master's, measured at start)
puts them on this worker's clock, and records go back on the harness's, from its anchor.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import gevent

from moeperf.collectors.records import RequestRecord
from moeperf.collectors.serving_records import WorkerSummary
from moeperf.suites.serving.load.plan import LevelPlan, WorkerConfig
from moeperf.suites.serving.load.request_of import body_of, new_record
from moeperf.suites.serving.locust_engine.selfwatch import GeventSelfWatch

_POLL_S = 0.005


class Cancelled(Exception):
    """Raised in a user's greenlet whose request the drain gave up on."""


@dataclass
class WorkerRun:
    """What a worker knows for the whole run (from the master's config message)."""

    config: WorkerConfig
    index: int
    offset_ns: int  # this worker's monotonic clock minus the master's

    def __post_init__(self) -> None:
        self.sequence = itertools.count()  # request numbers, across levels: ids stay unique
        self.cycles: dict[tuple[int, int], Iterator[int]] = {}  # positions in each slice

    def now_ns(self) -> int:
        """Now on the harness's clock, from its anchor (what records hold)."""
        return time.monotonic_ns() - self.offset_ns - self.config.anchor_ns

    def positions(self, plan: LevelPlan) -> Iterator[int]:
        """The level's positions in its slice of the prompts, as the asyncio workers take
        them: from the worker's offset, or (``resume_prompts``, after its first level of
        the slice) on from where the last level of that slice stopped."""
        key = (plan.prompt_start, plan.prompt_count)
        if key not in self.cycles or not plan.resume_prompts:
            size = plan.prompt_count or len(self.config.prompts)
            self.cycles[key] = itertools.islice(
                itertools.cycle(range(size)), plan.prompt_offset, None
            )
        return self.cycles[key]


class RunningLevel:
    """The level a worker's users are running; ``plan`` on this worker's clock."""

    def __init__(
        self,
        run: WorkerRun,
        plan: LevelPlan,
        on_record: Callable[[RequestRecord], None],
    ):
        self.run = run
        self.plan = replace(plan, start_ns=plan.start_ns + run.offset_ns)
        self.end_ns = self.plan.start_ns + int(plan.duration_s * 1e9)
        self.on_record = on_record
        self._budget = (
            itertools.count() if plan.max_requests is None else iter(range(plan.max_requests))
        )
        self._positions = run.positions(plan)
        self.first_prompt: int | None = None  # its position in the slice
        self.spent = False  # the budget ran out before the window
        self.sent = 0
        self.in_flight: dict[gevent.Greenlet, RequestRecord] = {}
        self.watch = GeventSelfWatch()

    def sending(self) -> bool:
        return not self.spent and time.monotonic_ns() < self.end_ns

    def take(self) -> tuple[RequestRecord, dict] | None:
        """The next request of this worker, or None when the level sends no more."""
        wait_s = (self.plan.start_ns - time.monotonic_ns()) / 1e9
        if wait_s > 0:
            gevent.sleep(wait_s)
        if not self.sending():
            return None
        if next(self._budget, None) is None:
            self.spent = True
            return None
        run = self.run
        position = next(self._positions)
        if self.first_prompt is None:
            self.first_prompt = position
        prompt = run.config.prompts[self.plan.prompt_start + position]
        intended_abs_ns = time.monotonic_ns() - run.offset_ns  # closed loop: sent now
        request_id = f"{run.config.request_id_prefix}L{run.index}-{next(run.sequence)}"
        plan_on_master = replace(self.plan, start_ns=self.plan.start_ns - run.offset_ns)
        record = new_record(
            request_id, plan_on_master, run.index, intended_abs_ns, run.config.anchor_ns, prompt
        )
        self.sent += 1
        return record, body_of(run.config, prompt)

    def wait_done(self) -> WorkerSummary:
        """Until the window is over (or the budget spent) and nothing is in flight, what
        is still running ``drain_timeout_s`` after that cancelled; then this worker's
        summary of the level."""
        while self.sending():
            gevent.sleep(_POLL_S)
        deadline_ns = time.monotonic_ns() + int(self.plan.drain_timeout_s * 1e9)
        while self.in_flight and time.monotonic_ns() < deadline_ns:
            gevent.sleep(_POLL_S)
        for greenlet in list(self.in_flight):
            greenlet.kill(Cancelled, block=False)
        while self.in_flight:
            gevent.sleep(_POLL_S)
        return WorkerSummary(
            self.run.index, self.plan.scenario, self.sent, self.sent, 0, self.watch.stop(),
            self.first_prompt,
        )  # fmt: skip

    def stop_now(self) -> None:
        """The run was stopped: send nothing more and cancel what is in flight now."""
        self.end_ns = time.monotonic_ns()
        self.plan = replace(self.plan, drain_timeout_s=0.0)
