"""Dashboards as code: the models, and the committed JSON they are written as.

`serving_dashboard()` and `training_dashboard()` are pure: they return fresh SDK models.
`render()` turns a model into the exact text committed under dashboards/generated/ (sorted
keys, 2-space indent, trailing newline), so regenerating is byte-for-byte reproducible.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import Dashboard

from .serving import serving_dashboard
from .training import training_dashboard

GENERATED_DIR = Path(__file__).parent / "generated"

# File stem under generated/ -> the function building that dashboard.
DASHBOARDS: dict[str, Callable[[], Dashboard]] = {
    "serving": serving_dashboard,
    "training": training_dashboard,
}

__all__ = [
    "DASHBOARDS",
    "GENERATED_DIR",
    "dashboard_json",
    "render",
    "rendered_files",
    "serving_dashboard",
    "training_dashboard",
]


def dashboard_json(model: Dashboard) -> dict:
    """The model as plain JSON data (what Grafana's API and file provisioning take)."""
    return json.loads(json.dumps(model, cls=JSONEncoder))


def render(model: Dashboard) -> str:
    """The committed text of a dashboard: sorted keys, 2-space indent, trailing newline."""
    return json.dumps(dashboard_json(model), sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def rendered_files() -> dict[str, str]:
    """File name under generated/ -> its expected text, for every dashboard."""
    return {f"{stem}.json": render(build()) for stem, build in DASHBOARDS.items()}
