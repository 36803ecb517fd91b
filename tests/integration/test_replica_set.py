"""Replicas of the reference target behind a real router (SGLang's model gateway,
suites/serving/elastic/router.py), over loopback: requests reach every replica, a replica
added serves, one scaled in gets nothing more and is gone, one killed is gone, a restart
answers again, and closing leaves no process."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from moeperf.suites.serving.elastic.replicas import ReplicaSet, reference_launch
from moeperf.suites.serving.elastic.router import RouterSettings
from moeperf.suites.serving.preflight import http_get

# The reference target, one torch thread per replica (the threads rule on a small host).
ONE_THREAD = reference_launch({"threads": 1, "enable_prefix_caching": False})


def complete(url: str, count: int) -> list[int]:
    """``count`` short completions through ``url``: their HTTP statuses."""
    body = json.dumps({"model": "moeperf-tiny-moe", "prompt": "hello", "max_tokens": 2})
    statuses = []
    for _ in range(count):
        request = urllib.request.Request(
            url + "/v1/completions", data=body.encode(), method="POST",
            headers={"content-type": "application/json"},
        )  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                statuses.append(answer.status)
        except urllib.error.HTTPError as error:  # the router's answer for a failed backend
            statuses.append(error.code)
    return statuses


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_replicas_scale_out_in_and_die_behind_the_router():
    replicas = ReplicaSet(ONE_THREAD, 2, http_get, router=RouterSettings())
    try:
        router = replicas.router
        assert router is not None
        one, two = replicas.replicas
        assert complete(replicas.url, 6) == [200] * 6
        served = router.served()
        assert served[one.url] == 3 and served[two.url] == 3  # round robin
        # Scale out: the third replica is listed healthy and takes its turn.
        three = replicas.scale_out()
        assert {w.url for w in router.workers() if w.healthy} == {one.url, two.url, three.url}
        assert complete(replicas.url, 6) == [200] * 6
        assert router.served()[three.url] == 2
        # Scale in: the first is deregistered, drained (nothing runs) and stopped.
        drained_s = replicas.scale_in(0, drain_timeout_s=10)
        assert drained_s < 10 and not one.alive and one.state == "removed"
        assert {w.url for w in router.workers()} == {two.url, three.url}
        before = router.served()
        assert complete(replicas.url, 4) == [200] * 4
        after = router.served()
        assert after[one.url] == before[one.url]  # nothing more reached it
        assert after[two.url] + after[three.url] == before[two.url] + before[three.url] + 4
        # A kill takes the whole group at once; a restart answers again on its port.
        replicas.kill(1)
        assert not two.alive and two.state == "killed"
        # Its turns are retried on the one left (the router's defaults): nothing fails.
        assert complete(replicas.url, 4) == [200] * 4
        replicas.restart(1)
        assert two.alive and two.state == "serving" and len(two.starts_s) == 2
    finally:
        replicas.close()
    assert not any(r.alive for r in replicas.replicas)
    assert router is not None and not router.alive


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_router_without_health_checks_or_retries_keeps_sending_to_a_dead_replica():
    # The planted misconfiguration an elastic drill must catch: the router never finds
    # out that a backend died, and does not retry elsewhere.
    settings = RouterSettings(health_checks=False, retries=False)
    replicas = ReplicaSet(ONE_THREAD, 2, http_get, router=settings)
    try:
        replicas.kill(1)
        statuses = complete(replicas.url, 6)
        # Round robin: every other request goes to the dead one and fails there.
        assert statuses.count(200) == 3 and len([s for s in statuses if s >= 500]) == 3
        assert replicas.router is not None
        assert all(w.healthy for w in replicas.router.workers())  # it never noticed
    finally:
        replicas.close()
