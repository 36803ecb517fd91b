"""Injecting a drill's faults on schedule while its level runs, from a thread of the
harness's main process (the load workers do not know a drill is on: they see what a
client of a failing server sees).

Each fault is recorded as a ``FaultEvent`` (collectors/drill_records.py) and as a note
in the manifest the moment it ends, so a drill cut short keeps what it did.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable

from moeperf.collectors.drill_records import FaultEvent
from moeperf.suites.errors import SuiteError
from moeperf.suites.serving.embedded.process import EmbeddedTarget
from moeperf.suites.serving.faults.spec import WINDOW_FAULTS, DrillSpec, FaultSpec

_HEALTH_POLL_S = 0.05
_CONTROL_TIMEOUT_S = 5.0
_OUTPUT_TAIL_CHARS = 300


class InjectionFailed(SuiteError):
    """A fault could not be injected (or its target not brought back); the run goes on."""


class Drill:
    """Runs ``spec``'s faults against the target, timed from a level's start."""

    def __init__(
        self,
        spec: DrillSpec,
        base_url: str,
        process: EmbeddedTarget | None,
        anchor_ns: int,
        on_event: Callable[[FaultEvent], None] = lambda _event: None,
    ):
        self.spec = spec
        self.base_url = base_url.rstrip("/")
        self.process = process
        self.anchor_ns = anchor_ns
        self.on_event = on_event
        self.events: list[FaultEvent] = []
        # Set by the runner once its load workers exist: a drop_pool fault calls it.
        self.drop_pools: Callable[[], None] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def kills(self) -> int:
        return sum(1 for e in self.events if e.kind == "kill" and e.injected)

    def level_started(self, scenario: str, level_start_ns: int) -> None:
        """Inject the faults from a thread, at ``at_s`` after ``level_start_ns``
        (``time.monotonic_ns``): a level hook (suites/serving/level_loop.py)."""
        self._thread = threading.Thread(
            target=self._run, args=(level_start_ns,), name="moeperf-drill", daemon=True
        )
        self._thread.start()

    def level_ended(self) -> None:
        """After the level: stop injecting, and leave the target running (resumed)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.process is not None:
            self.process.resume()

    def _run(self, level_start_ns: int) -> None:
        for index, fault in enumerate(self.spec.faults):
            due_ns = level_start_ns + int(fault.at_s * 1e9)
            if self._stop.wait(max(0.0, (due_ns - time.monotonic_ns()) / 1e9)):
                return
            injected_ns = time.monotonic_ns()
            requests_hit = None
            try:
                if fault.kind in WINDOW_FAULTS:
                    detail, requests_hit = self._window(fault)
                else:
                    detail = self._inject(fault)
                ok = True
            except (InjectionFailed, OSError) as exc:
                detail, ok = f"injection failed: {exc}", False
            event = FaultEvent(
                index=index,
                kind=fault.kind,
                planned_at_s=fault.at_s,
                injected_ns=injected_ns - self.anchor_ns,
                cleared_ns=time.monotonic_ns() - self.anchor_ns,
                injected=ok,
                detail=detail,
                requests_hit=requests_hit,
            )
            self.events.append(event)
            self.on_event(event)

    def _inject(self, fault: FaultSpec) -> str:
        """Do a fault that is not a window and wait for its end; what was done, in words."""
        if fault.kind == "kill":
            return self._kill(fault)
        if fault.kind == "stall":
            return self._stall(fault)
        if fault.kind == "hook":
            return self._hook(fault)
        assert fault.kind == "drop_pool", fault.kind  # the spec admits no other kind
        if self.drop_pools is None:
            raise InjectionFailed("no load workers to drop the pools of")
        self.drop_pools()
        return "every load worker told to close its connection pool"

    def _embedded(self) -> EmbeddedTarget:
        if self.process is None:  # the spec's validation refuses this; kept honest here
            raise InjectionFailed("the target is not a process moeperf started")
        return self.process

    def _kill(self, fault: FaultSpec) -> str:
        process = self._embedded()
        pid = process.pid
        process.kill()
        self._stop.wait(fault.restart_after_s)
        started = time.monotonic()
        try:
            process.restart()
        except SuiteError as exc:
            raise InjectionFailed(f"SIGKILL pid {pid}; the restart failed: {exc}") from None
        return (
            f"SIGKILL pid {pid}; restarted as pid {process.pid} after "
            f"{fault.restart_after_s:g} s, ready in {time.monotonic() - started:.2f} s"
        )

    def _stall(self, fault: FaultSpec) -> str:
        process = self._embedded()
        assert fault.for_s is not None
        process.pause()
        try:
            self._stop.wait(fault.for_s)
        finally:
            process.resume()
        return f"SIGSTOP pid {process.pid} for {fault.for_s:g} s, then SIGCONT"

    def _window(self, fault: FaultSpec) -> tuple[str, int | None]:
        """Open the window, wait it out, and ask the target how many requests it caught:
        what was done, in words, and that count (None: the target did not say)."""
        assert fault.for_s is not None
        body = {"kind": fault.kind, "for_s": fault.for_s, "status": fault.status}
        self._control("POST", json.dumps(body).encode())
        self._stop.wait(fault.for_s)
        what = f"HTTP {fault.status}" if fault.kind == "http_error" else fault.kind
        detail = f"{what} to every generation request for {fault.for_s:g} s"
        try:
            report = json.loads(self._control("GET", None))
            requests_hit = report["requests_hit"]
            if report["kind"] != fault.kind or not isinstance(requests_hit, int):
                raise ValueError(f"not this window's report: {report!r}")
        except (InjectionFailed, ValueError, KeyError, TypeError) as exc:
            # The window was opened: the fault stands, only its count is unknown.
            return f"{detail}; the target did not say how many requests it caught ({exc})", None
        return detail, requests_hit

    def _control(self, method: str, data: bytes | None) -> bytes:
        """``method`` /drill/fault on the target; the answer's body."""
        request = urllib.request.Request(
            f"{self.base_url}/drill/fault",
            data=data,
            headers={"Content-Type": "application/json"},
            method=method,
        )
        try:
            with urllib.request.urlopen(request, timeout=_CONTROL_TIMEOUT_S) as answer:
                body: bytes = answer.read()
                return body
        except urllib.error.HTTPError as exc:
            text = exc.read().decode(errors="replace")[:_OUTPUT_TAIL_CHARS]
            raise InjectionFailed(f"{method} /drill/fault answered {exc.code}: {text}") from None
        except urllib.error.URLError as exc:
            raise InjectionFailed(f"{method} /drill/fault failed: {exc.reason}") from None

    def _hook(self, fault: FaultSpec) -> str:
        started = time.monotonic()
        try:
            done = subprocess.run(
                fault.command,
                shell=True,  # the user's own command line, from their own spec
                capture_output=True,
                text=True,
                timeout=fault.hook_timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise InjectionFailed(
                f"the hook {fault.command!r} ran past {fault.hook_timeout_s:g} s"
            ) from None
        ran_s = time.monotonic() - started
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip()[-_OUTPUT_TAIL_CHARS:]
            raise InjectionFailed(
                f"the hook {fault.command!r} exited {done.returncode} after {ran_s:.2f} s: {tail}"
            )
        healthy_s = self._await_health()
        return f"hook {fault.command!r} exited 0 in {ran_s:.2f} s; healthy {healthy_s:.2f} s later"

    def _await_health(self) -> float:
        """Poll the health URL until a 2xx; the seconds it took."""
        url = self.spec.health_url or f"{self.base_url}/health"
        started = time.monotonic()
        deadline = started + self.spec.health_timeout_s
        last = "no answer"
        while time.monotonic() < deadline and not self._stop.is_set():
            try:
                with urllib.request.urlopen(url, timeout=_CONTROL_TIMEOUT_S) as answer:
                    if 200 <= answer.status < 300:
                        return time.monotonic() - started
                    last = f"HTTP {answer.status}"
            except urllib.error.HTTPError as exc:
                last = f"HTTP {exc.code}"
            except (urllib.error.URLError, OSError) as exc:
                last = str(getattr(exc, "reason", exc))
            time.sleep(_HEALTH_POLL_S)
        raise InjectionFailed(
            f"{url} not healthy within {self.spec.health_timeout_s:g} s (last: {last})"
        )
