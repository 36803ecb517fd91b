"""What a run's manifest says of its target, as a typed record: the fields reports, the
runs table and a run's notes read. The manifest keeps the whole description as the runner
wrote it (an embedded target's config, a probe's result, an A/B run's arms), shown as is in
a report's details; this is the part read by name, so no reader digs through the dict."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


def _text(value: Any) -> str | None:
    return None if value in (None, "") else str(value)


@dataclass(frozen=True, slots=True)
class TargetDescription:
    """A run's target: what it is, where, and what it served."""

    kind: str | None = None  # "url", "synthetic", "reference", "cluster_sim", ...
    url: str | None = None
    model: str | None = None
    api: str | None = None  # "chat" or "completions"
    # As the target reports it (vLLM's /version), or the engine's name.
    engine_version: str | None = None
    # Its latencies are configured (the synthetic target, the simulator), not a model's.
    simulated: bool = False
    # The reference target's torch threads, and the rule that chose them.
    threads: int | None = None
    threads_rule: str | None = None

    @classmethod
    def of(cls, target: Mapping[str, Any] | None) -> TargetDescription:
        """The description a manifest's ``target`` holds; a field it lacks is None (an
        older run, or a target that does not say)."""
        target = target or {}
        config = target.get("config")
        threads = config.get("threads") if isinstance(config, Mapping) else None
        return cls(
            kind=_text(target.get("kind")),
            url=_text(target.get("url")),
            model=_text(target.get("model")),
            api=_text(target.get("api")),
            engine_version=_text(target.get("engine_version") or target.get("engine")),
            simulated=bool(target.get("simulated")),
            threads=threads if isinstance(threads, int) else None,
            threads_rule=_text(target.get("threads_rule")),
        )

    @property
    def label(self) -> str:
        """What a run measured, in a few words: the URL of a remote target (kind "url"),
        else the target's kind, an embedded target's URL being a port on 127.0.0.1 that was
        gone when the run ended; then the model, where the manifest names one."""
        where = self.url if self.kind in ("url", None) and self.url else self.kind
        return " ".join(part for part in (where, self.model) if part)
