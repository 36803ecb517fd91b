"""The embedded reference serving target as the harness sees it: where its model lives,
the tokenizer that gives prompts of exact length, and how the manifest describes it.

The target itself (``targets.serving``) runs in a child process; nothing here imports
torch, so the harness stays light even when it drives the reference engine.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from moeperf.suites.errors import UsageError
from moeperf.suites.serving.embedded.process import EmbeddedTarget, embedded_target
from moeperf.suites.serving.spec import ServingSpec
from moeperf.suites.serving.target_spec import reference_config

MODULE = "moeperf.targets.serving"
# Importing torch and loading the weights on a slow, busy 2-core machine.
READY_TIMEOUT_S = 180.0
_RECIPE_FILE = "recipe.json"
_CONFIG_FILE = "config.json"


def default_model_dir() -> Path:
    """The model shipped in ``targets/model/default``, found without importing torch."""
    found = importlib.util.find_spec("moeperf.targets.model")
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


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask, which a container's CPU set
    narrows), else the host's count."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def host_threads(cores: int) -> int:
    """The embedded engine's torch threads when the spec does not set them: half of the
    usable cores, at least one. The harness (its client and load workers) runs on the same
    cores; measured on the 2-core development host (docs/getting-started/first-benchmark.md), one
    torch thread served 1.1 to 2.8 times the output tokens/s of torch's default (one thread
    per core) at 1 to 32 streams, because the engine's threads then no longer fight the
    harness for both cores."""
    return max(1, cores // 2)


def threads_rule(spec: ServingSpec) -> str:
    """How the engine's thread count was chosen, for the manifest and the run's output."""
    if "threads" in spec.target.reference:
        return "set by the spec (target.reference.threads)"
    cores = usable_cores()
    return f"half of the {cores} usable cores, at least 1; the harness shares them"


def target_config(spec: ServingSpec) -> dict[str, Any]:
    """The JSON config the target is started with: every knob, the model dir resolved, and
    the thread count of ``host_threads`` unless the spec set one."""
    config = reference_config(spec.target.reference)
    fields = config.model_dump(mode="json")
    if "threads" not in spec.target.reference:
        fields["threads"] = host_threads(usable_cores())
    return {**fields, "model_dir": str(model_dir(config))}


def describe(config: dict[str, Any], url: str, rule: str = "") -> dict[str, Any]:
    """The manifest's target entry: the knobs, the model directory, its recipe's hash, and
    how its thread count was chosen."""
    directory = Path(config["model_dir"])
    return {
        "kind": "reference",
        "url": url,
        "config": config,
        "threads_rule": rule,
        "model_dir": str(directory),
        "recipe_sha256": _sha256(directory / _RECIPE_FILE),
        "simulated": False,
    }


@contextmanager
def embedded_reference(
    spec: ServingSpec, ready_timeout_s: float = READY_TIMEOUT_S
) -> Iterator[tuple[EmbeddedTarget, dict[str, Any]]]:
    """Start the reference target of ``spec``; yield (its process, its description)."""
    config = target_config(spec)
    with embedded_target(MODULE, config, ready_timeout_s=ready_timeout_s) as target:
        yield target, describe(config, target.url, threads_rule(spec))


@contextmanager
def running_reference(spec: ServingSpec) -> Iterator[tuple[str, dict[str, Any]]]:
    """Start the reference target of ``spec``; yield (its base URL, its description)."""
    with embedded_reference(spec) as (target, described):
        yield target.url, described
