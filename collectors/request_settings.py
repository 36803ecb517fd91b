"""What the harness asked of the target in every request of a run: ``RequestSettings``.

These settings change the numbers a target gives: on the reference engine, a third-party
harness that left sampling at the server's default measured 251 output tok/s, moeperf's
greedy requests 187, and the same third-party harness with temperature 0 191. So a run's
manifest records them (``RunManifest.request_settings``, built by the runner from the
worker config it actually used), and compare and the gate refuse runs whose requests
differed (reports/comparability.py).

``Sampling`` is also what the request builder sends (suites/serving/load/openai_api.py):
a field that is None is not sent at all, so the target uses its own default.

Runs stored before the settings were recorded have none in their manifest;
``legacy_request_settings`` derives them from the resolved spec, knowing that every such
harness sent temperature 0.0 and no other sampling field (``LEGACY_SAMPLING``), asked for
usage, and named the output cap ``max_tokens`` where the spec had no switch saying otherwise.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from moeperf.collectors.errors import CollectorError


@dataclass(frozen=True, slots=True)
class Sampling:
    """The sampling fields of a request; None: not sent (the server's default)."""

    temperature: float | None = 0.0
    top_p: float | None = None
    # Not an OpenAI field (vLLM, SGLang and TGI take it; OpenAI itself refuses it).
    top_k: int | None = None
    seed: int | None = None

    def sent(self) -> dict[str, float | int]:
        """The request body's sampling fields: those that are set, by their API names."""
        return {
            name: value
            for name, value in (
                ("temperature", self.temperature),
                ("top_p", self.top_p),
                ("top_k", self.top_k),
                ("seed", self.seed),
            )
            if value is not None
        }


# Greedy decoding, nothing else sent: the default, and what every harness sent before
# sampling could be set.
GREEDY = Sampling()
LEGACY_SAMPLING = Sampling(temperature=0.0)
SAMPLING_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Sampling))


@dataclass(frozen=True)
class RequestSettings:
    """The settings every request of a run was sent with, and how often the target's
    /metrics were scraped. Request headers are never part of it (they may carry keys)."""

    api: str
    sampling: Sampling
    # stream_options.include_usage was sent.
    include_usage: bool
    # stream_options.continuous_usage_stats was sent (never without include_usage).
    continuous_usage: bool
    ignore_eos: bool
    # None: not sent.
    min_tokens: int | None
    # The name the output cap was sent under: "max_tokens" or "max_completion_tokens".
    max_tokens_field: str
    # Merged into every body last, as given in target.extra_body.
    extra_body: dict[str, Any] = field(default_factory=dict)
    # None: the target's /metrics were not scraped.
    scrape_interval_s: float | None = None

    def items(self) -> tuple[tuple[str, Any], ...]:
        """(dotted name, value) of every setting, in a fixed order: what compare and the
        gate check, and what reports list."""
        return (
            ("api", self.api),
            *((f"sampling.{name}", getattr(self.sampling, name)) for name in SAMPLING_FIELDS),
            ("include_usage", self.include_usage),
            ("continuous_usage", self.continuous_usage),
            ("ignore_eos", self.ignore_eos),
            ("min_tokens", self.min_tokens),
            ("max_tokens_field", self.max_tokens_field),
            ("extra_body", self.extra_body),
            ("scrape_interval_s", self.scrape_interval_s),
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "manifest.json") -> RequestSettings:
        """The record as ``to_dict`` wrote it; keys added by later minor versions are
        ignored, a missing one is a ``CollectorError`` naming it."""
        try:
            sampling = data["sampling"]
            return cls(
                api=str(data["api"]),
                sampling=Sampling(**{name: sampling[name] for name in SAMPLING_FIELDS}),
                include_usage=bool(data["include_usage"]),
                continuous_usage=bool(data["continuous_usage"]),
                ignore_eos=bool(data["ignore_eos"]),
                min_tokens=data["min_tokens"],
                max_tokens_field=str(data["max_tokens_field"]),
                extra_body=dict(data["extra_body"]),
                scrape_interval_s=data["scrape_interval_s"],
            )
        except (KeyError, TypeError) as exc:
            raise CollectorError(
                f"{where}: request_settings is malformed ({type(exc).__name__}: {exc}); "
                "it is written by the serving runner, so the file was edited or truncated"
            ) from None


def unset_meaning(name: str) -> str:
    """What None means for the setting ``name`` (a dotted name of ``items()``)."""
    if name.startswith("sampling."):
        return "not sent: the server's default"
    if name == "scrape_interval_s":
        return "not scraped"
    return "not sent"


def legacy_request_settings(spec_resolved: Mapping[str, Any]) -> RequestSettings:
    """The settings of a serving run stored before they were recorded, from its resolved
    spec: temperature 0.0 and no other sampling field; a switch the spec lacks (older
    specs had no include_usage, max_tokens_field or min_tokens) as the harness of the time
    behaved: usage asked for, ``max_tokens``, no ``min_tokens``; a key missing altogether,
    the spec's default."""
    target = _table(spec_resolved, "target")
    export = _table(spec_resolved, "export")
    include_usage = bool(target.get("include_usage", True))
    scraped = bool(export.get("scrape_target", True))
    return RequestSettings(
        api=str(target.get("api", "completions")),
        sampling=LEGACY_SAMPLING,
        include_usage=include_usage,
        continuous_usage=include_usage and bool(target.get("continuous_usage", True)),
        ignore_eos=bool(target.get("ignore_eos", True)),
        min_tokens=target.get("min_tokens"),
        max_tokens_field=str(target.get("max_tokens_field", "max_tokens")),
        extra_body=dict(target.get("extra_body") or {}),
        scrape_interval_s=float(export.get("scrape_interval_s", 2.0)) if scraped else None,
    )


def _table(spec: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    table = spec.get(name)
    return table if isinstance(table, Mapping) else {}
