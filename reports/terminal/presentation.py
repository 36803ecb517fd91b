"""What the terminal prints of a stored run, in three parts (each suite's presenter makes
one): the answer to the suite's question, printed always and last; the per-level,
per-block and per-window detail, printed with ``--verbose``; and what the run could not
measure, each said once in a line.

The command that shows the run (moeperf/cli.py) prints the detail (when asked), then the
answer, the unavailable lines, and ends with the run's status and paths: a user reads
the answer where the output ends, not in the middle of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from rich.table import Table

T = TypeVar("T")

# A rich table, or a plain line (printed as is: never read as markup).
Item = Table | str


@dataclass(frozen=True)
class Presentation:
    """One run for the terminal: ``answer`` always, ``detail`` with --verbose, and
    ``unavailable``: "what: not available (why)", one line per missing thing."""

    answer: Sequence[Item] = ()
    detail: Sequence[Item] = ()
    unavailable: Sequence[str] = field(default_factory=tuple)

    def __add__(self, other: Presentation) -> Presentation:
        return Presentation(
            answer=[*self.answer, *other.answer],
            detail=[*self.detail, *other.detail],
            unavailable=said_once([*self.unavailable, *other.unavailable]),
        )


def said_once(lines: Sequence[T]) -> tuple[T, ...]:
    """``lines`` without repeats, in the order first said."""
    return tuple(dict.fromkeys(lines))
