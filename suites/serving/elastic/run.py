"""An elastic run's pieces for the serving runner: the replicas and router started before
the level (and stopped after it, whatever happens), the run's note, and the summary of
its events (collectors/elastic_summary.py judges them)."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pandas as pd

from moeperf.collectors.drill_records import DrillSummary
from moeperf.collectors.elastic_records import ElasticSummary
from moeperf.collectors.elastic_summary import summarize_elastic
from moeperf.suites.serving.elastic.drill import ElasticDrill
from moeperf.suites.serving.elastic.replicas import (
    Launch,
    ReplicaSet,
    command_launch,
    reference_launch,
)
from moeperf.suites.serving.elastic.router import RouterSettings
from moeperf.suites.serving.elastic.spec import ElasticSpec
from moeperf.suites.serving.load.auth import request_headers
from moeperf.suites.serving.preflight import http_get
from moeperf.suites.serving.spec import ServingSpec


@contextmanager
def elastic_replicas(
    spec: ServingSpec, elastic: ElasticSpec
) -> Iterator[tuple[ReplicaSet, dict[str, Any]]]:
    """The replicas and their router, started; (them, the manifest's target entry)."""
    launch: Launch
    if spec.target.kind == "reference":
        from moeperf.suites.serving.embedded.reference import target_config  # torch: only here

        config = target_config(spec)
        launch, replica = reference_launch(config), {"kind": "reference", "config": config}
    else:
        launch, replica = (
            command_launch(elastic.command),
            {"kind": "url", "command": elastic.command},
        )
    settings = RouterSettings(
        policy=elastic.policy, health_check_interval_s=elastic.health_check_interval_s,
        health_checks=elastic.health_checks, retries=elastic.retries,
        breaker_timeout_s=elastic.breaker_timeout_s,
        startup_timeout_s=elastic.startup_timeout_s,
    )  # fmt: skip
    get = functools.partial(http_get, headers=request_headers(spec.target, os.environ))
    replicas = ReplicaSet(launch, elastic.replicas, get, elastic.startup_timeout_s, settings)
    try:
        assert replicas.router is not None
        described = {
            "kind": "elastic", "url": replicas.url, "router": replicas.router.describe(),
            "replicas": elastic.replicas, "replica": replica,
            "replica_urls": [r.url for r in replicas.replicas], "simulated": False,
        }  # fmt: skip
        yield replicas, described
    finally:
        replicas.close()


def elastic_note(spec: ServingSpec, target: dict[str, Any]) -> str:
    assert spec.elastic is not None
    what = "the reference target" if spec.target.kind == "reference" else "elastic.command"
    events = ", ".join(
        f"{e.action}{'' if e.replica is None else f' {e.replica}'} at {e.at_s:g} s"
        for e in spec.elastic.events
    )
    return (
        f"Target: {spec.elastic.replicas} replicas of {what} behind a router ({target['router']}) "
        f"at {target['url']}, started by moeperf on this host; events during the level: "
        f"{events}. The replicas share the host's cores with each other and the load workers."
    )


def elastic_summary(
    drill: ElasticDrill, drilled: DrillSummary, requests: pd.DataFrame
) -> ElasticSummary:
    """The drill's events beside their outcomes, judged against the spec's limits."""
    spec = drill.spec
    router = drill.replicas.router
    return summarize_elastic(
        drilled,
        drill.actions,
        requests,
        router=router.describe() if router is not None else "",
        replicas_started=len(drill.replicas.replicas),
        shares=drill.shares(),
        max_recovery_s=spec.max_recovery_s,
        max_first_served_s=spec.max_first_served_s,
        min_scale_out_ratio=spec.min_scale_out_ratio,
        detection_s=router.detection_s if router is not None else 0.0,
    )
