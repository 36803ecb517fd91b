"""reference/specs.md: the specs shipped in suites/specs/, read from the files themselves."""

from __future__ import annotations

from typing import Any

from moeperf.docs.markdown import GENERATED, code, table
from moeperf.suites.spec_files import (
    EXTEND_KEY,
    SPEC_DIR,
    read_spec_file,
    shipped_spec_names,
)


def page() -> str:
    rows = []
    for name in shipped_spec_names():
        data = read_spec_file(SPEC_DIR / f"{name}.toml")  # extends merged in
        with open(SPEC_DIR / f"{name}.toml", "rb") as f:
            own = f.read().decode()
        extends = _own_extend(own)
        rows.append((
            code(name),
            str(data.get("suite", "")),
            _target(data),
            (f"extends {code(extends)}; " if extends else "") + str(data.get("description", "")),
        ))  # fmt: skip
    return (
        "# Shipped specs\n\n" + GENERATED
        + "\nThe specs that ship with moeperf, in `suites/specs/`: `moeperf run NAME` runs "
        "one by name, a path runs your own. A spec may extend another (`extend = "
        "\"NAME\"`): the `-full` specs are the full-sized versions of the CI-sized ones. "
        "Their fields: [Spec fields](spec-fields.md).\n\n"
        + table(("spec", "suite", "target", "what it measures"), rows)
    )  # fmt: skip


def _own_extend(text: str) -> str:
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == EXTEND_KEY:
            return value.strip().strip('"')
    return ""


def _target(data: dict[str, Any]) -> str:
    target = data.get("target")
    if not isinstance(target, dict):
        return ""
    return str(target.get("kind", "synthetic"))
