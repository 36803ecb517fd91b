"""The unit a field's name carries (the code names every quantity with its unit)."""

from __future__ import annotations

# Longest suffix first: "_per_s" before "_s".
_SUFFIXES = (
    ("_mib_per_hour", "MiB/h"),
    ("_percent_per_hour", "%/h"),
    ("_points_per_hour", "points/h"),
    ("_per_hour", "per hour"),
    ("_bytes_per_s", "bytes/s"),
    ("_flops_per_s", "FLOP/s"),
    ("_per_s", "per second"),
    ("_ms", "ms"),
    ("_s", "s"),
    ("_ns", "ns"),
    ("_bytes", "bytes"),
    ("_mib", "MiB"),
    ("_gib", "GiB"),
    ("_gb", "GB"),
    ("_percent", "%"),
    ("_points", "percentage points"),
    ("_ratio", "ratio"),
    ("_fraction", "fraction"),
    ("_tokens", "tokens"),
    ("_watts", "W"),
    ("_joules", "J"),
)


def unit_of(name: str) -> str:
    """``stall_timeout_s`` -> ``s``; a name without a unit suffix -> ``""``."""
    for suffix, unit in _SUFFIXES:
        if name.endswith(suffix):
            return unit
    return ""
