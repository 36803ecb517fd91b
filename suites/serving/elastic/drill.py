"""An elasticity drill's events carried out on schedule while its level runs, from a thread
of the harness's main process, on the replica set (replicas.py); the load workers only see
the router.

Each event is recorded as the fault drill records a fault (``FaultEvent``: its failures and
recovery are then summarized the same way, collectors/drill_summary.py) and as an
``ElasticAction`` with what only an elastic event has: the requests the replica held, how
long a scale-in drained, when a new or restarted replica first served. A note goes to the
manifest the moment each ends, so a drill cut short keeps what it did.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from moeperf.collectors.drill_records import FaultEvent
from moeperf.collectors.elastic_records import ElasticAction
from moeperf.suites.errors import SuiteError
from moeperf.suites.serving.elastic.replicas import ReplicaSet, in_flight
from moeperf.suites.serving.elastic.spec import ElasticEventSpec, ElasticSpec

_SERVED_POLL_S = 0.05


@dataclass
class _FirstServed:
    """A new or restarted replica watched for its first request served, in a thread of its
    own, so that the events after it keep their times."""

    thread: threading.Thread | None = None
    seconds: float | None = None


@dataclass(frozen=True)
class _Done:
    detail: str
    cleared_ns: int  # the action itself over (registered, stopped, killed)
    replica: int
    in_flight: float | None = None
    first_served: _FirstServed | None = None
    drained_s: float | None = None
    struck_ns: int | None = None  # a kill's SIGKILL (time.monotonic_ns)


class ElasticDrill:
    """Runs ``spec``'s events on ``replicas``, timed from a level's start (a level hook)."""

    def __init__(
        self,
        spec: ElasticSpec,
        replicas: ReplicaSet,
        anchor_ns: int,
        on_event: Callable[[FaultEvent], None] = lambda _event: None,
    ):
        self.spec = spec
        self.replicas = replicas
        self.anchor_ns = anchor_ns
        self.on_event = on_event
        self.events: list[FaultEvent] = []
        self._done: list[tuple[int, str, int, _Done]] = []  # index, action, serving before
        # The router's per-replica counts at the level's start and end: their shares.
        self.served_before: dict[str, float] = {}
        self.served_after: dict[str, float] = {}
        self.drop_pools: Callable[[], None] | None = None  # unused: no drop_pool event
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def kills(self) -> int:
        """Events that changed the replicas (any: a replica's counters start again)."""
        return len(self.events)

    def level_started(self, scenario: str, level_start_ns: int) -> None:
        self.served_before = self._served()
        self._thread = threading.Thread(
            target=self._run, args=(level_start_ns,), name="moeperf-elastic", daemon=True
        )
        self._thread.start()

    def level_ended(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        for *_, done in self._done:
            if done.first_served is not None and done.first_served.thread is not None:
                done.first_served.thread.join()
        self.served_after = self._served()

    @property
    def actions(self) -> list[ElasticAction]:
        """Each event as carried out (after ``level_ended``: every first-served watch over)."""
        return [
            ElasticAction(
                index, action, done.replica, done.in_flight,
                done.first_served.seconds if done.first_served is not None else None,
                done.drained_s, serving,
                None if done.struck_ns is None else done.struck_ns - self.anchor_ns,
            )
            for index, action, serving, done in self._done
        ]  # fmt: skip

    def shares(self) -> dict[int, float]:
        """Each replica's share of the requests the router sent during the level."""
        by_url = {r.url: r.index for r in self.replicas.replicas}
        sent = {
            by_url[url]: count - self.served_before.get(url, 0.0)
            for url, count in self.served_after.items()
            if url in by_url
        }
        total = sum(sent.values())
        return {i: n / total for i, n in sorted(sent.items())} if total else {}

    def _served(self) -> dict[str, float]:
        router = self.replicas.router
        try:
            return router.served() if router is not None else {}
        except OSError:
            return {}

    def _run(self, level_start_ns: int) -> None:
        for index, event in enumerate(self.spec.events):
            due_ns = level_start_ns + int(event.at_s * 1e9)
            if self._stop.wait(max(0.0, (due_ns - time.monotonic_ns()) / 1e9)):
                self._missed(index)
                return
            started_ns = time.monotonic_ns()
            serving = len(self.replicas.serving())
            try:
                done = self._act(event, started_ns)
                ok = True
            except (SuiteError, OSError) as exc:
                replica = event.replica if event.replica is not None else -1
                done, ok = _Done(f"failed: {exc}", time.monotonic_ns(), replica), False
            fault = FaultEvent(
                index=index, kind=event.action, planned_at_s=event.at_s,
                injected_ns=started_ns - self.anchor_ns,
                cleared_ns=done.cleared_ns - self.anchor_ns, injected=ok, detail=done.detail,
            )  # fmt: skip
            self.events.append(fault)
            self._done.append((index, event.action, serving, done))
            self.on_event(fault)

    def _missed(self, first: int) -> None:
        """The events the level ended before (the ones before them ran long): recorded as
        not carried out, so that their verdicts fail rather than vanish."""
        now_ns = time.monotonic_ns() - self.anchor_ns
        for index, event in enumerate(self.spec.events[first:], start=first):
            detail = "not carried out: the level ended before it was due"
            fault = FaultEvent(index, event.action, event.at_s, now_ns, now_ns, False, detail)
            replica = event.replica if event.replica is not None else -1
            self.events.append(fault)
            self._done.append((index, event.action, 0, _Done(detail, now_ns, replica)))
            self.on_event(fault)

    def _act(self, event: ElasticEventSpec, started_ns: int) -> _Done:
        replicas, spec = self.replicas, self.spec
        if event.action == "scale_out":
            count = self._served()
            replica = replicas.scale_out()
            cleared = time.monotonic_ns()
            first = self._watch_first(replica.url, count.get(replica.url, 0.0), started_ns)
            return _Done(f"replica {replica.index} started and registered ({replica.url})",
                         cleared, replica.index, first_served=first)  # fmt: skip
        assert event.replica is not None  # the spec requires it for the other actions
        replica = replicas.replicas[event.replica]
        if event.action == "scale_in":
            held = in_flight(replica.url)
            drained_s = replicas.scale_in(event.replica, spec.drain_timeout_s)
            return _Done(f"replica {event.replica} deregistered, drained in {drained_s:.2f} s "
                         "and stopped", time.monotonic_ns(), event.replica, held,
                         drained_s=drained_s)  # fmt: skip
        if event.action == "kill":
            held = in_flight(replica.url)
            struck_ns = time.monotonic_ns()  # after the gauge's read: the kill's own instant
            replicas.kill(event.replica)
            return _Done(f"replica {event.replica} killed (SIGKILL) holding {held} request(s)",
                         time.monotonic_ns(), event.replica, held,
                         struck_ns=struck_ns)  # fmt: skip
        count = self._served()
        replicas.restart(event.replica)
        cleared = time.monotonic_ns()
        first = self._watch_first(replica.url, count.get(replica.url, 0.0), started_ns)
        return _Done(f"replica {event.replica} started again ({replica.url})", cleared,
                     event.replica, first_served=first)  # fmt: skip

    def _watch_first(self, url: str, before: float, started_ns: int) -> _FirstServed:
        """A thread that sets the seconds from ``started_ns`` until the router counts one
        more request answered by ``url`` than ``before``; left None if not within
        ``max_first_served_s``, or before the level ends."""
        found = _FirstServed()

        def watch() -> None:
            deadline_ns = started_ns + int(self.spec.max_first_served_s * 1e9)
            while time.monotonic_ns() < deadline_ns and not self._stop.is_set():
                if self._served().get(url, 0.0) > before:
                    found.seconds = (time.monotonic_ns() - started_ns) / 1e9
                    return
                time.sleep(_SERVED_POLL_S)

        found.thread = threading.Thread(target=watch, name="moeperf-first-served", daemon=True)
        found.thread.start()
        return found
