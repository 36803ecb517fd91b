"""RunManifest: what a run is, what it ran against, on what host, and how it ended."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from moeperf.collectors.request_settings import RequestSettings, legacy_request_settings
from moeperf.collectors.schema import SCHEMA_VERSION, check_schema_version
from moeperf.collectors.target_description import TargetDescription

# complete: every level ok. failed: it ran to its end, but some level's requests mostly
# failed for the target's reasons. invalid: some level was client-bound (and none failed).
# aborted: it did not run to its end (interrupt, crash). Older runs never say "failed".
RunStatus = Literal["running", "complete", "failed", "aborted", "invalid"]


@dataclass(slots=True)
class RunManifest:
    """The manifest.json of one run directory.

    ``anchor_monotonic_ns`` is the monotonic clock reading that every record's
    timestamps are measured from; ``anchor_wall_time`` is the wall-clock time taken at
    the same moment, so that records can be placed on a calendar.
    """

    run_id: str
    suite: str
    anchor_monotonic_ns: int
    anchor_wall_time: str
    host: dict[str, Any]
    spec_given: dict[str, Any] = field(default_factory=dict)
    spec_resolved: dict[str, Any] = field(default_factory=dict)
    target: dict[str, Any] = field(default_factory=dict)
    git_sha: str | None = None
    status: RunStatus = "running"
    status_reason: str | None = None
    ended_wall_time: str | None = None
    pid: int | None = None
    hostname: str | None = None
    # Plain statements about how to read the results, e.g. what warm-up excluded.
    notes: list[str] = field(default_factory=list)
    # What every request asked of the target (serving runs); None in runs stored before
    # it was recorded: run_request_settings (below) derives theirs.
    request_settings: RequestSettings | None = None
    schema_version: int = SCHEMA_VERSION

    @property
    def described_target(self) -> TargetDescription:
        """The target as a typed record (``target`` keeps the whole description)."""
        return TargetDescription.of(self.target)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "manifest.json") -> RunManifest:
        check_schema_version(data.get("schema_version"), where)
        known = {f.name for f in dataclasses.fields(cls)}
        # Fields added by later minor versions are ignored rather than refused.
        fields = {k: v for k, v in data.items() if k in known}
        if fields.get("request_settings") is not None:
            fields["request_settings"] = RequestSettings.from_dict(
                fields["request_settings"], where
            )
        return cls(**fields)


def run_request_settings(manifest: RunManifest) -> RequestSettings | None:
    """A serving run's settings: as recorded, else derived (``legacy_request_settings``);
    None for runs of other suites, which send no requests."""
    if manifest.request_settings is not None:
        return manifest.request_settings
    if manifest.suite != "serving":
        return None
    return legacy_request_settings(manifest.spec_resolved)
