"""``--set KEY=VALUE`` overrides of a spec: parsed, applied to the raw data, and blamed.

Overrides are applied before validation, so they are checked exactly like the file; a
problem they caused is reported against the flag and its value (``blame``), not against the
spec file, which for a shipped spec lies somewhere under site-packages.
"""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from moeperf.suites.errors import SpecError

SpecKey = tuple[str, ...]  # a dotted spec key, split: ("load", "duration_s")


class FlagOverride(str):
    """An override a command-line flag made (``--repeat 0`` sets ``load.repeats=0``): a
    problem it causes is blamed on that flag, not on a ``--set`` the user never typed.
    A plain ``str`` everywhere else (the manifest stores the assignment)."""

    flag: str

    def __new__(cls, assignment: str, flag: str) -> FlagOverride:
        made = super().__new__(cls, assignment)
        made.flag = flag
        return made


@dataclass(frozen=True)
class Override:
    """One ``--set``: the assignment as given, its key split at the dots, its TOML value,
    and the flag a message names (``--set KEY=VALUE``, or the flag that made it)."""

    text: str
    path: SpecKey
    value: Any
    flag: str = ""

    @property
    def shown(self) -> str:
        """How the user typed it: ``--set load.repeats=0``, or ``--repeat 0``."""
        return self.flag or f"--set {self.text}"

    @classmethod
    def parse(cls, assignment: str) -> Override:
        """``load.levels=[1,4]`` -> path ("load", "levels"), value [1, 4]; bare words stay
        strings."""
        key, sep, raw = assignment.partition("=")
        if not sep or not key.strip():
            raise SpecError(f"--set {assignment!r}: expected KEY=VALUE, e.g. load.duration_s=5")
        try:
            value = tomllib.loads(f"v = {raw.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw.strip()
        flag = assignment.flag if isinstance(assignment, FlagOverride) else ""
        return cls(str(assignment), tuple(key.strip().split(".")), value, flag)

    def concerns(self, path: SpecKey) -> bool:
        """Whether a problem at ``path`` may be this override's doing: it set that value or a
        table holding it, or a value under ``path`` (a rule of that table, or a table name
        that is not one). A rule of the whole spec is the file's."""
        shared = min(len(path), len(self.path))
        return shared > 0 and path[:shared] == self.path[:shared]


def parse_override(assignment: str) -> tuple[list[str], Any]:
    """``load.levels=[1,4]`` -> (["load", "levels"], [1, 4]); bare words stay strings."""
    override = Override.parse(assignment)
    return list(override.path), override.value


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """``data`` with each override set in it, in order (``data`` itself is changed)."""
    for assignment in overrides:
        override = Override.parse(assignment)
        node = data
        for part in override.path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise SpecError(f"--set {assignment!r}: {part!r} is not a table")
            node = child
        node[override.path[-1]] = override.value
    return data


def blame(overrides: Sequence[str], paths: Sequence[SpecKey]) -> list[Override]:
    """The overrides that may have caused a problem at any of ``paths``: the last one per
    key, since a later ``--set`` of the same key replaced the earlier one."""
    latest = {override.path: override for override in map(Override.parse, overrides)}
    return [o for o in latest.values() if any(o.concerns(path) for path in paths)]
