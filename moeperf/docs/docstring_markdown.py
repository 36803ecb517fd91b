"""A module docstring as Markdown: the same text, its lists and paragraphs kept.

The docstrings the definitions quote are written as plain text with ``-`` lists and
hanging indents; Markdown needs a blank line before a list and joins a paragraph's lines
itself. Nothing is reworded: the page shows exactly the report appendix's text.
"""

from __future__ import annotations

import inspect


def docstring_markdown(docstring: str) -> str:
    """Paragraphs joined into single lines, each ``- `` item one line, a blank line between
    blocks; lines indented past a list item's text continue it."""
    blocks: list[str] = []
    current: list[str] = []
    kind = ""  # "p" paragraph, "li" list item

    def flush() -> None:
        nonlocal current, kind
        if current:
            text = " ".join(current)
            blocks.append(text)
        current, kind = [], ""

    for line in inspect.cleandoc(docstring).splitlines():
        stripped = line.strip()
        if not stripped:
            flush()
            continue
        if stripped.startswith("- ") and not line.startswith("  "):
            flush()
            current, kind = [stripped], "li"
            continue
        if kind == "li" and not line.startswith("  "):
            flush()  # an unindented line after a list item starts a paragraph
        if not current:
            kind = "p"
        current.append(stripped)
    flush()
    # Consecutive list items form one list: no blank line between them.
    out: list[str] = []
    for block in blocks:
        if out and block.startswith("- ") and out[-1].startswith("- "):
            out[-1] += "\n" + block
        else:
            out.append(block)
    return "\n\n".join(out) + "\n"
