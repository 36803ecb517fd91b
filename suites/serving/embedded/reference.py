"""The embedded reference serving target as the harness sees it: where its model lives,
the tokenizer that gives prompts of exact length, and how the manifest describes it.

The target itself (``targets.serving``) runs in a child process; nothing here imports
torch, so the harness stays light even when it drives the reference engine.
"""

from __future__ import annotations

import hashlib
import importlib.util
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from suites.errors import UsageError
from suites.serving.embedded.process import running_target
from suites.spec import ServingSpec, reference_config

MODULE = "targets.serving"
# Importing torch and loading the weights on a slow, busy 2-core machine.
READY_TIMEOUT_S = 180.0
_RECIPE_FILE = "recipe.json"
_CONFIG_FILE = "config.json"


def default_model_dir() -> Path:
    """The model shipped in ``targets/model/default``, found without importing torch."""
    found = importlib.util.find_spec("targets.model")
    if found is None or not found.submodule_search_locations:
        raise RuntimeError("the targets.model package is not installed")
    return Path(next(iter(found.submodule_search_locations))) / "default"


def model_dir(config: Any) -> Path:
    """The model directory a ``ReferenceTargetConfig`` names, or the shipped one; a
    ``UsageError`` (exit 2) before anything starts when it holds no model."""
    given = getattr(config, "model_dir", None)
    directory = Path(given).expanduser().resolve() if given else default_model_dir()
    if not (directory / _CONFIG_FILE).is_file():
        raise UsageError(
            f"target.reference.model_dir: {directory} is not a model directory (no "
            f"{_CONFIG_FILE}); write one with `moeperf target train --out DIR`, or leave "
            "model_dir unset for the shipped model"
        )
    return directory


def with_reference_defaults(spec: ServingSpec) -> ServingSpec:
    """For kind reference: the model's own tokenizer.json gives exact prompt lengths,
    unless the spec chose ``workload.tokenizer`` itself."""
    if spec.target.kind != "reference" or "tokenizer" in spec.workload.model_fields_set:
        return spec
    tokenizer = str(model_dir(reference_config(spec.target.reference)))
    workload = spec.workload.model_copy(update={"tokenizer": tokenizer})
    return spec.model_copy(update={"workload": workload})


def _sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def target_config(spec: ServingSpec) -> dict[str, Any]:
    """The JSON config the target is started with: every knob, the model dir resolved."""
    config = reference_config(spec.target.reference)
    return {**config.model_dump(mode="json"), "model_dir": str(model_dir(config))}


def describe(config: dict[str, Any], url: str) -> dict[str, Any]:
    """The manifest's target entry: the knobs, the model directory, its recipe's hash."""
    directory = Path(config["model_dir"])
    return {
        "kind": "reference",
        "url": url,
        "config": config,
        "model_dir": str(directory),
        "recipe_sha256": _sha256(directory / _RECIPE_FILE),
        "simulated": False,
    }


@contextmanager
def running_reference(spec: ServingSpec) -> Iterator[tuple[str, dict[str, Any]]]:
    """Start the reference target of ``spec``; yield (its base URL, its description)."""
    config = target_config(spec)
    with running_target(MODULE, config, ready_timeout_s=READY_TIMEOUT_S) as url:
        yield url, describe(config, url)
