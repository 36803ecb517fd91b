"""reference/exit-codes.md: moeperf's exit codes, from moeperf/exits.py."""

from __future__ import annotations

from moeperf import exits
from moeperf.docs.field_comments import module_constant_comments
from moeperf.docs.markdown import GENERATED, code, paragraphs, table


def page() -> str:
    comments = module_constant_comments(exits)
    rows = [
        (code(str(getattr(exits, name))), code(name), comments.get(name, ""))
        for name in sorted(comments, key=lambda n: getattr(exits, n))
        if name.startswith("EXIT_")
    ]
    return (
        "# Exit codes\n\n" + GENERATED + "\n" + paragraphs(exits.__doc__) + "\n"
        + table(("code", "name", "when"), rows)
        + "\n`moeperf run --warn-only` exits 0 for a run whose levels failed or were invalid "
        "(the run's status still says so); an aborted run still exits 1, or 130 when a "
        "signal (Ctrl-C) ended it.\n"
    )  # fmt: skip
