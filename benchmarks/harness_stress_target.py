"""The synthetic target's own counters as the harness stress benchmark reads them
(benchmarks/harness_stress.py): requests finished by outcome and faults injected, from its
/metrics page: the ground truth the harness's records are checked against.

Apart from the benchmark's runs so the parsing of the exposition is tested on its own.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True)
class TargetCounts:
    """The synthetic target's own counters: requests finished by outcome, faults injected."""

    requests: Mapping[str, float] = field(default_factory=dict)
    faults: Mapping[str, float] = field(default_factory=dict)

    def minus(self, before: TargetCounts) -> TargetCounts:
        def delta(now: Mapping[str, float], then: Mapping[str, float]) -> dict[str, float]:
            return {k: v - then.get(k, 0.0) for k, v in now.items()}

        return TargetCounts(
            delta(self.requests, before.requests), delta(self.faults, before.faults)
        )


def target_counts(exposition: str) -> TargetCounts:
    """``synthetic_requests_total`` by status and ``synthetic_faults_total`` by fault."""
    requests: dict[str, float] = {}
    faults: dict[str, float] = {}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            if sample.name == "synthetic_requests_total":
                requests[sample.labels["status"]] = sample.value
            elif sample.name == "synthetic_faults_total":
                faults[sample.labels["fault"]] = sample.value
    return TargetCounts(requests, faults)


def read_target(url: str) -> TargetCounts:
    with urllib.request.urlopen(url.rstrip("/") + "/metrics", timeout=10) as response:
        return target_counts(response.read().decode())
