"""Whether two runs may be gated against each other: the same kind of host, the same spec.

A candidate is judged against a baseline only when both were measured on hosts of the same
fingerprint (``collectors.sources.fingerprint.fingerprint_key``: CPU model, cores, GPUs) and ran
the same resolved spec in everything that decides what the numbers mean (``COMPARED``):
suite; target kind and model; workload kind, input and output lengths, shared prefix,
dataset, prefixes, conversations, trace and cache mode; load mode, levels and repeats;
SLOs. And the runs must have asked the same of the
target: every request setting (``collectors.request_settings``: the API, sampling as sent,
usage options, ignore_eos, min_tokens, the output cap's name, extra_body, the scrape
interval), compared as ``request.<name>``, as recorded or, for runs stored before they
were, derived from the resolved spec. Sampling alone moved one engine's throughput by a
third. Durations, seeds, harness limits and live-export settings may differ (they change
how many samples there are, not what they measure). A mismatch is refused (exit 2) naming
each differing field with both values, unless forced; a forced verdict says what was
overridden, on the terminal and in gate.json. ``moeperf compare`` refuses differing
request settings only (``check_requests``), and notes other spec differences.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from moeperf.collectors.manifest import RunManifest, run_request_settings
from moeperf.collectors.request_settings import unset_meaning
from moeperf.collectors.sources.fingerprint import fingerprint_key
from moeperf.reports.errors import ReportUsageError, SpecMismatchError

# The resolved spec's fields (dotted paths into manifest.spec_resolved) that must match,
# per suite. "target.model" is the model the target reported where the manifest has it.
# The API is a request setting: compared as request.api, with the others.
COMPARED: Mapping[str, tuple[str, ...]] = {
    "serving": (
        "suite",
        "target.kind",
        "target.model",
        "workload.kind",
        "workload.input_tokens",
        "workload.output_tokens",
        "workload.shared_prefix_tokens",
        "workload.dataset_path",
        "workload.prefix",
        "workload.conversation",
        "workload.trace",
        "workload.cache",
        "load.mode",
        "load.levels",
        "load.repeats",
        "load.ramp_s",
        "slo",
    ),
    "training": ("suite", "kind", "trainer.model", "matrix"),
}
_ABSENT = object()
# Fields added after runs were first stored: what an older run's absence means. Prefixes,
# conversations, traces, repeats and ramps did not exist, so it ran without them (its
# streams all started at once). Its prompts were drawn on from one pool, not per level, and
# nothing was reset: neither of today's workload.cache modes, so that field is compared
# only between runs that both record it.
_ABSENT_MEANS: Mapping[str, Any] = {
    "workload.prefix": None,
    "workload.conversation": None,
    "workload.trace": None,
    "load.repeats": 1,
    "load.ramp_s": 0.0,
}
_COMPARED_WHEN_RECORDED = frozenset({"workload.cache"})
# The field names of request-setting differences start with this.
REQUEST_PREFIX = "request."


@dataclass(frozen=True)
class FingerprintCheck:
    matches: bool
    forced: bool
    baseline: tuple
    candidate: tuple


@dataclass(frozen=True)
class SpecDifference:
    """One compared field of the resolved spec, as each side has it (None: absent)."""

    field: str
    baseline: Any
    candidate: Any

    @property
    def request(self) -> bool:
        """A request setting (``request.<name>``), not a field of the spec."""
        return self.field.startswith(REQUEST_PREFIX)

    def describe(self) -> str:
        unset = (
            f"null ({unset_meaning(self.field.removeprefix(REQUEST_PREFIX))})"
            if self.request
            else "(absent)"
        )
        a, b = _show(self.baseline, unset), _show(self.candidate, unset)
        return f"{self.field}: baseline {a}, candidate {b}"


@dataclass(frozen=True)
class SpecCheck:
    """The compared fields that differ (none: comparable) and whether that was forced."""

    differences: tuple[SpecDifference, ...]
    forced: bool

    @property
    def matches(self) -> bool:
        return not self.differences


def check_fingerprints(
    baseline_host: Mapping[str, Any],
    candidate_host: Mapping[str, Any],
    force: bool = False,
    *,
    promote_hint: str = "",
) -> FingerprintCheck:
    """Refuse runs measured on different hosts (ReportUsageError, exit 2) unless forced.
    ``promote_hint``: the command that would record a baseline here, shown in the error."""
    a, b = fingerprint_key(dict(baseline_host)), fingerprint_key(dict(candidate_host))
    if a != b and not force:
        record = (
            f"record a baseline on this host ({promote_hint})"
            if promote_hint
            else ("record a baseline on this host")
        )
        raise ReportUsageError(
            "the runs were measured on different hosts and are not comparable:\n"
            f"  baseline  (cpu, cores, gpus): {a}\n"
            f"  candidate (cpu, cores, gpus): {b}\n"
            f"{record}, or pass --force to gate anyway (the verdict then says it was forced)"
        )
    return FingerprintCheck(matches=a == b, forced=a != b, baseline=a, candidate=b)


def spec_differences(baseline: RunManifest, candidate: RunManifest) -> list[SpecDifference]:
    """The compared fields of the two runs' resolved specs (and requests) that differ."""
    suite = str(candidate.spec_resolved.get("suite", candidate.suite))
    fields = COMPARED.get(suite, ("suite",))
    differences = []
    for path in fields:
        a, b = _field(baseline, path), _field(candidate, path)
        if path in _COMPARED_WHEN_RECORDED and _ABSENT in (a, b):
            continue
        a, b = (_ABSENT_MEANS.get(path, v) if v is _ABSENT else v for v in (a, b))
        if a != b:
            differences.append(
                SpecDifference(path, None if a is _ABSENT else a, None if b is _ABSENT else b)
            )
    return differences + request_differences(baseline, candidate)


def check_specs(
    baseline: RunManifest, candidate: RunManifest, force: bool = False, *, promote_hint: str = ""
) -> SpecCheck:
    """Refuse runs of different resolved specs (SpecMismatchError, exit 2) unless forced.
    ``promote_hint``: a command that records a baseline of the candidate's spec without
    touching the one gated against (a baseline of its own name)."""
    differences = spec_differences(baseline, candidate)
    if differences and not force:
        lines = "\n".join(f"  {d.describe()}" for d in differences)
        remedy = (
            f"promote a baseline of this spec ({promote_hint})"
            if promote_hint
            else ("promote a baseline of this spec")
        )
        note = _REQUEST_NOTE if any(d.request for d in differences) else ""
        raise SpecMismatchError(
            f"the runs ran different specs and are not comparable ({len(differences)} "
            f"field(s) differ):\n{lines}\n{note}"
            f"gate a run of the baseline's spec, {remedy}, or pass --force to gate anyway "
            "(the verdict then lists what was overridden)"
        )
    return SpecCheck(tuple(differences), forced=bool(differences))


_REQUEST_NOTE = (
    "request.* are what the harness asked of the target in every request (sampling and "
    "usage options change its throughput)\n"
)


def request_differences(baseline: RunManifest, candidate: RunManifest) -> list[SpecDifference]:
    """The request settings (``collectors.request_settings``) that differ, as
    ``request.<name>`` with both values; none when either run sends no requests (a
    training or micro run: its suite differs, or neither has any)."""
    a, b = run_request_settings(baseline), run_request_settings(candidate)
    if a is None or b is None:
        return []
    return [
        SpecDifference(f"{REQUEST_PREFIX}{name}", x, y)
        for (name, x), (_, y) in zip(a.items(), b.items(), strict=True)
        if x != y
    ]


def check_requests(a: RunManifest, b: RunManifest, force: bool = False) -> list[SpecDifference]:
    """``moeperf compare``'s check: refuse runs whose requests differed in any request
    setting (SpecMismatchError, exit 2) unless forced; the differences either way."""
    differences = request_differences(a, b)
    if differences and not force:
        lines = "\n".join(f"  {d.describe()}" for d in differences)
        raise SpecMismatchError(
            f"the runs asked different things of the target and are not comparable "
            f"({len(differences)} request setting(s) differ; baseline = A, candidate = B):\n"
            f"{lines}\n"
            "sampling and usage options change a target's throughput (and, with speculative "
            "decoding, its acceptance); pass --force to compare anyway"
        )
    return differences


def _field(manifest: RunManifest, path: str) -> Any:
    if path == "suite":
        return manifest.spec_resolved.get("suite", manifest.suite)
    if path == "target.model":
        # The model the target reported (or the spec set) where the manifest records it.
        reported = manifest.described_target.model
        if reported:
            return reported
    value: Any = manifest.spec_resolved
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return _ABSENT
        value = value[part]
    return value


def _show(value: Any, unset: str = "(absent)") -> str:
    if value is None:
        return unset
    return json.dumps(value, sort_keys=True, separators=(", ", ": "), default=str)
