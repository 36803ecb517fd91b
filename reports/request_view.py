"""A run's request settings as (label, text) lines: the HTML report's facts and
``moeperf runs show`` state what every request asked of the target.

Sampling is listed field by field as sent, "server default" for a field that was not
sent; a run stored before the settings were recorded says that its are derived
(``collectors.request_settings.legacy_request_settings``).
"""

from __future__ import annotations

import json
from typing import Any

from moeperf.collectors.manifest import RunManifest, run_request_settings
from moeperf.collectors.request_settings import unset_meaning

DERIVED_NOTE = (
    "derived from the run's spec: it was stored before request settings were recorded, "
    "and every harness before then sent temperature 0.0 and no other sampling field"
)


def request_facts(manifest: RunManifest) -> list[tuple[str, str]]:
    """(label, text) of the sampling as sent and the other request settings; none for a
    run that sends no requests (training, micro)."""
    settings = run_request_settings(manifest)
    if settings is None:
        return []
    sampling, other = [], []
    for name, value in settings.items():
        if name.startswith("sampling."):
            field = name.removeprefix("sampling.")
            sampling.append(f"{field}={'server default' if value is None else _text(value)}")
        else:
            other.append(f"{name}={unset_meaning(name) if value is None else _text(value)}")
    facts = [("sampling (as sent)", ", ".join(sampling)), ("request settings", ", ".join(other))]
    if manifest.request_settings is None:
        facts.append(("request settings from", DERIVED_NOTE))
    return facts


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    return str(value)
