"""The host fingerprint stored in every manifest: what a result was measured on.

The gate refuses to compare runs from different fingerprints, so only facts that change
performance belong here (not the hostname or the boot time).
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import shutil
import subprocess
from typing import Any

import psutil

# Versions that change what a benchmark measures.
_LIBRARIES = (
    "moeperf",
    "aiohttp",
    "uvloop",
    "numpy",
    "pandas",
    "pyarrow",
    "torch",
    "tokenizers",
)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _library_versions() -> dict[str, str]:
    versions = {}
    for name in _LIBRARIES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def _gpus() -> list[dict[str, str]]:
    """GPUs as nvidia-smi reports them; empty where there is none."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=name,memory.total,driver_version",
                "--format=csv,noheader",
            ],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in out.strip().splitlines():
        name, memory, driver = (part.strip() for part in line.split(","))
        gpus.append({"name": name, "memory": memory, "driver": driver})
    return gpus


def host_fingerprint() -> dict[str, Any]:
    """Facts about this host that a measurement depends on."""
    return {
        "cpu_model": _cpu_model(),
        "logical_cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "memory_bytes": psutil.virtual_memory().total,
        "machine": platform.machine(),
        "system": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "gpus": _gpus(),
        "libraries": _library_versions(),
    }


def fingerprint_key(fingerprint: dict[str, Any]) -> tuple:
    """The part of a fingerprint two comparable runs must share."""
    gpus = tuple(g["name"] for g in fingerprint.get("gpus", []))
    return (fingerprint.get("cpu_model"), fingerprint.get("logical_cores"), gpus)
