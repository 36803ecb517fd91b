"""The Locust user: one closed-loop stream of the running level. Its task sends the
level's next request the moment the previous one ended, through the gevent transport,
records it (the harness's record code) and reports TTFT, TPOT and E2E to Locust's
statistics as "TTFT <scenario>", "TPOT <scenario>" and "E2E <scenario>" (milliseconds,
the ok requests; a failed request is an E2E failure with its error type)."""

from __future__ import annotations

import gevent
from locust import User, constant, task

from moeperf.collectors.latency import request_latencies
from moeperf.collectors.records import RequestRecord
from moeperf.suites.serving.load.stream_state import set_token_times
from moeperf.suites.serving.locust_engine.level import Cancelled, RunningLevel
from moeperf.suites.serving.locust_engine.transport import Connection

_IDLE_S = 0.005


class WorkerState:
    """The worker process's running level (None between levels), set by its messages."""

    level: RunningLevel | None = None


STATE = WorkerState()


class StreamUser(User):
    wait_time = constant(0)

    def on_start(self) -> None:
        self._connection: Connection | None = None

    def on_stop(self) -> None:
        if self._connection is not None:
            self._connection.close()

    @task
    def send(self) -> None:
        level = STATE.level
        taken = level.take() if level is not None else None
        if level is None or taken is None:
            gevent.sleep(_IDLE_S)
            return
        record, body = taken
        config = level.run.config
        if self._connection is None:
            self._connection = Connection(
                config.base_url, config.api, dict(config.headers.values), config.stall_timeout_s
            )
        me = gevent.getcurrent()
        level.in_flight[me] = record
        try:
            self._connection.stream(
                config.api,
                body,
                record,
                level.run.now_ns,
                0,
                config.request_timeout_s,
                config.headers.secrets,
            )
        except Cancelled:
            record.status = "cancelled"
            record.done_ns = level.run.now_ns()
            if record.send_ns == 0:
                record.send_ns = record.done_ns
            set_token_times(record)
            self._connection.close()
        finally:
            level.in_flight.pop(me, None)
        level.on_record(record)
        self._report(record)

    def _report(self, record: RequestRecord) -> None:
        fire = self.environment.events.request.fire
        if record.status != "ok":
            fire(
                request_type="E2E",
                name=record.scenario,
                response_time=(record.done_ns - record.send_ns) / 1e6,
                response_length=0,
                exception=RuntimeError(record.error_type or record.status),
                context={},
            )
            return
        latencies = request_latencies(record)
        tokens = record.output_tokens or 0
        for kind, value_s in (
            ("TTFT", latencies.ttft_s),
            ("TPOT", latencies.tpot_s),
            ("E2E", latencies.e2e_s),
        ):
            if value_s is not None:
                fire(
                    request_type=kind,
                    name=record.scenario,
                    response_time=value_s * 1e3,
                    response_length=tokens,
                    exception=None,
                    context={},
                )
