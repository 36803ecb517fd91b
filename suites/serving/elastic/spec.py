"""``[elastic]``: replicas of the target behind a real router, scaled and killed on a
schedule while one load level runs (suites/serving/elastic/, docs/guides/elasticity.md).

Actions, at ``at_s`` seconds after the level starts, or when the one before has ended (a
replica's start and registration included; its first request served is watched beside
the events after it), whichever is later; each event's record gives when it really
started, and one the level ended before is recorded as not carried out:
- ``scale_out``: start one more replica, register it with the router (it is numbered after
  every replica started before it);
- ``scale_in``: deregister ``replica`` from the router, let what it holds finish (up to
  ``drain_timeout_s``), stop it;
- ``kill``: SIGKILL ``replica``'s processes, the router not told;
- ``restart``: start a killed or scaled-in ``replica`` again on its port (the router's
  health checks find a killed one again; a scaled-in one is registered again).

The verdicts, each against a limit below: a scale-in loses no request; a kill loses at most
the requests the killed replica held when it died (its own /metrics' running and waiting
gauges, read just before) and the level recovers within ``max_recovery_s``; a replica
started or restarted serves its first request within ``max_first_served_s``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from moeperf.suites.spec_base import Positive, Strict

Action = Literal["scale_out", "scale_in", "kill", "restart"]
# The router's policies that need no tokenizer of the model (suites/serving/elastic/router.py).
Policy = Literal["round_robin", "random", "power_of_two", "cache_aware"]


class ElasticEventSpec(Strict):
    # When, in seconds after the level starts.
    at_s: Annotated[float, Field(ge=0)]
    # scale_out, scale_in, kill or restart (the module docstring: what each does).
    action: Action
    # scale_in, kill, restart: which replica, 0-based in start order.
    replica: Annotated[int, Field(ge=0)] | None = None


class ElasticSpec(Strict):
    # Replicas started before the level (the reference target with [target.reference]'s
    # knobs, or target.kind = "url" with command).
    replicas: Annotated[int, Field(ge=1, le=16)] = 2
    # target.kind = "url": each replica's command, with {port} (a free port per replica),
    # {replica} (its index) and {env:NAME}; target.url is then the router's, ignored.
    command: str = ""
    # The router's policy for choosing a replica.
    policy: Policy = "round_robin"
    # The router's health checks of its replicas, this often (seconds); off: it keeps
    # sending to a replica that died (a misconfiguration a kill's verdict must catch).
    health_checks: bool = True
    health_check_interval_s: Annotated[int, Field(ge=1, le=60)] = 1
    # The router retries a request that failed on one replica on another; off: it does not.
    retries: bool = True
    # After 10 failures the router stops sending to a replica for this long (its circuit
    # breaker; the router's default is 60 s, longer than a restart takes).
    breaker_timeout_s: Annotated[int, Field(ge=1, le=600)] = 60
    # How long a replica (and the router) has to start and answer.
    startup_timeout_s: Positive = 120.0
    # scale_in: how long a deregistered replica may finish what it holds before it is stopped.
    drain_timeout_s: Positive = 30.0
    # Latency before an event and after its recovery: requests sent in this window.
    compare_window_s: Positive = 2.0
    # The events, in time order.
    events: Annotated[list[ElasticEventSpec], Field(min_length=1, max_length=32)]
    # Verdict: a kill's level recovers (a new request succeeds) within this.
    max_recovery_s: Positive = 10.0
    # Verdict: a replica started (scale_out) or restarted serves its first request within
    # this, from the action's start.
    max_first_served_s: Positive = 15.0
    # Verdict, off unless set: a scale-out's output tok/s after must reach this fraction of
    # before x (N + 1) / N, N the replicas serving before it. Only where the load keeps the
    # replicas busy and each has hardware of its own (on a few shared CPU cores the
    # replicas only divide them).
    min_scale_out_ratio: Annotated[float, Field(gt=0, le=1)] | None = None

    @model_validator(mode="after")
    def _events_in_order(self) -> ElasticSpec:
        states = ["serving"] * self.replicas
        last_at = -1.0
        for i, event in enumerate(self.events):
            where = f"elastic.events[{i}] ({event.action} at {event.at_s:g} s)"
            if event.at_s <= last_at:
                raise ValueError(f"{where}: give the events in time order, one at a time")
            last_at = event.at_s
            if event.action == "scale_out":
                if event.replica is not None:
                    raise ValueError(
                        f"{where}: scale_out starts a new replica (numbered {len(states)}): "
                        "remove replica"
                    )
                states.append("serving")
                continue
            if event.replica is None or event.replica >= len(states):
                raise ValueError(
                    f"{where}: needs replica, one of 0-{len(states) - 1} (the replicas "
                    "started by then)"
                )
            state = states[event.replica]
            if event.action in ("scale_in", "kill") and state != "serving":
                raise ValueError(f"{where}: replica {event.replica} is {state} by then")
            if event.action == "restart" and state == "serving":
                raise ValueError(
                    f"{where}: replica {event.replica} is serving by then; restart one "
                    "killed or scaled in"
                )
            states[event.replica] = {"scale_in": "removed", "kill": "killed"}.get(
                event.action, "serving"
            )
            if "serving" not in states:
                raise ValueError(f"{where}: leaves no replica serving (the router has none)")
        return self
