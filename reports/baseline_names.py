"""Baseline names and references (NAME@vN, NAME@latest): the rule a name follows and
the parse of a reference, with errors that say what is valid."""

from __future__ import annotations

import re

from moeperf.reports.errors import ReportUsageError

NAME_RULE = "[a-z0-9][a-z0-9._-]*"


NAME_PATTERN = re.compile(NAME_RULE + r"\Z")


REF_PATTERN = re.compile(r"(?P<name>[^@]*)(?:@(?:v?(?P<version>[0-9]+)|(?P<latest>latest)))?\Z")


def check_name(name: str) -> None:
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise ReportUsageError(
            f"baseline name {name!r} is not valid: it must match {NAME_RULE} "
            "(lower-case letters and digits, then also '.', '_' or '-')"
        )


def parse_ref(ref: str) -> tuple[str, int | None]:
    """Split a reference: "name@3" (or "name@v3") -> ("name", 3); "name" -> ("name", None).

    "name@latest" is "name": the latest version.
    """
    match = REF_PATTERN.match(ref)
    if match is None:
        raise ReportUsageError(
            f"baseline reference {ref!r}: expected NAME or NAME@VERSION, e.g. serving-cpu@3"
        )
    check_name(match["name"])
    version = int(match["version"]) if match["version"] is not None else None
    if version == 0:
        raise ReportUsageError(f"baseline reference {ref!r}: versions start at 1")
    return match["name"], version
