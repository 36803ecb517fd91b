"""Plain lines on a rich console: what every command prints that it did not write itself."""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console


def plain_lines(console: Console) -> Callable[[str], None]:
    """A printer of plain lines: no rich markup or highlighting, so text from a spec, a
    target or a file shows exactly as written, and never broken at the console's width: a
    path or a command printed here is one line to copy, however narrow the terminal (a pipe
    or a test worker has 80 columns)."""
    return lambda line: console.print(line, markup=False, highlight=False, soft_wrap=True)
