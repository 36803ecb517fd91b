"""Whether two runs may be gated against each other: the same kind of host, the same spec.

A candidate is judged against a baseline only when both were measured on hosts of the same
fingerprint (``collectors.fingerprint.fingerprint_key``: CPU model, cores, GPUs) and ran
the same resolved spec in everything that decides what the numbers mean (``COMPARED``):
suite; target kind, model and API; workload kind, input and output lengths, shared prefix
and dataset; load mode and levels; SLOs. Durations, seeds, harness limits and export
settings may differ (they change how many samples there are, not what they measure). A
mismatch is refused (exit 2) naming each differing field with both values, unless forced;
a forced verdict says what was overridden, on the terminal and in gate.json.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from collectors.fingerprint import fingerprint_key
from collectors.manifest import RunManifest
from reports.errors import ReportUsageError, SpecMismatchError

# The resolved spec's fields (dotted paths into manifest.spec_resolved) that must match,
# per suite. "target.model" is the model the target reported where the manifest has it.
COMPARED: Mapping[str, tuple[str, ...]] = {
    "serving": (
        "suite",
        "target.kind",
        "target.model",
        "target.api",
        "workload.kind",
        "workload.input_tokens",
        "workload.output_tokens",
        "workload.shared_prefix_tokens",
        "workload.dataset_path",
        "load.mode",
        "load.levels",
        "slo",
    ),
    "training": ("suite", "kind", "trainer.model", "matrix"),
}
_ABSENT = object()


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

    def describe(self) -> str:
        return f"{self.field}: baseline {_show(self.baseline)}, candidate {_show(self.candidate)}"


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


def check_specs(
    baseline: RunManifest, candidate: RunManifest, force: bool = False, *, promote_hint: str = ""
) -> SpecCheck:
    """Refuse runs of different resolved specs (SpecMismatchError, exit 2) unless forced."""
    suite = str(candidate.spec_resolved.get("suite", candidate.suite))
    fields = COMPARED.get(suite, ("suite",))
    differences = []
    for path in fields:
        a, b = _field(baseline, path), _field(candidate, path)
        if a != b:
            differences.append(
                SpecDifference(path, None if a is _ABSENT else a, None if b is _ABSENT else b)
            )
    if differences and not force:
        lines = "\n".join(f"  {d.describe()}" for d in differences)
        remedy = (
            f"promote a baseline of this spec ({promote_hint})"
            if promote_hint
            else ("promote a baseline of this spec")
        )
        raise SpecMismatchError(
            f"the runs ran different specs and are not comparable ({len(differences)} "
            f"field(s) differ):\n{lines}\n"
            f"gate a run of the baseline's spec, {remedy}, or pass --force to gate anyway "
            "(the verdict then lists what was overridden)"
        )
    return SpecCheck(tuple(differences), forced=bool(differences))


def _field(manifest: RunManifest, path: str) -> Any:
    if path == "suite":
        return manifest.spec_resolved.get("suite", manifest.suite)
    if path == "target.model":
        # The model the target reported (or the spec set) where the manifest records it.
        reported = manifest.target.get("model") if isinstance(manifest.target, dict) else None
        if reported:
            return reported
    value: Any = manifest.spec_resolved
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return _ABSENT
        value = value[part]
    return value


def _show(value: Any) -> str:
    if value is None:
        return "(absent)"
    return json.dumps(value, sort_keys=True, separators=(", ", ": "), default=str)
