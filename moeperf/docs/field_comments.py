"""The comment written beside each field of a class, read from its source.

Spec models and records say what a field means in a ``#`` comment above it (or at the end
of its line), as the code style asks; the reference pages quote those comments, so the
page and the code cannot disagree. Works for pydantic models and dataclasses alike: any
class body of annotated assignments.
"""

from __future__ import annotations

import ast
import inspect
import io
import textwrap
import tokenize
from functools import cache
from types import ModuleType


@cache
def class_field_comments(cls: type) -> dict[str, str]:
    """Each field annotated in ``cls``'s own body -> its comment (joined, without ``#``)."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}  # built by create_model or the like: no source of its own
    lines = source.splitlines()
    inline = _inline_comments(source)
    body = ast.parse(source).body[0]
    assert isinstance(body, ast.ClassDef)
    found: dict[str, str] = {}
    for node in body.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        above = _comment_above(lines, node.lineno)
        trailing = [inline[r] for r in range(node.lineno, (node.end_lineno or node.lineno) + 1)
                    if r in inline]  # fmt: skip
        text = " ".join([above, *trailing]).strip()
        if text and not text.startswith(("fmt:", "noqa", "type:")):
            found[node.target.id] = text
    return found


def field_comments(cls: type, *also: type) -> dict[str, str]:
    """Comments of every field of ``cls`` and its bases (the nearest class wins), then of
    ``also`` (classes whose fields ``cls`` copies, e.g. a dataclass a model is built from)."""
    found: dict[str, str] = {}
    for klass in (*reversed(also), *reversed(cls.__mro__)):
        found.update(class_field_comments(klass))
    return found


def _comment_above(lines: list[str], lineno: int) -> str:
    """The comment lines right above 1-based line ``lineno`` (no blank line between),
    joined, without their ``#``."""
    above: list[str] = []
    row = lineno - 2  # the line above, 0-based
    while row >= 0 and lines[row].strip().startswith("#"):
        above.insert(0, lines[row].strip().lstrip("#").strip())
        row -= 1
    return " ".join(above)


def _inline_comments(source: str) -> dict[int, str]:
    """1-based line -> the comment ending it, for lines that also hold code."""
    found: dict[int, str] = {}
    code_lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            if token.start[0] in code_lines:
                found[token.start[0]] = token.string.lstrip("#").strip()
        elif token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
                                tokenize.DEDENT):  # fmt: skip
            code_lines.update(range(token.start[0], token.end[0] + 1))
    # fmt: skip, noqa and type: comments are for tools, not readers.
    return {k: v for k, v in found.items() if not v.startswith(("fmt:", "noqa", "type:"))}


def module_constant_comments(module: ModuleType) -> dict[str, str]:
    """Each module-level ``NAME = value`` -> the comment above it (or ending its line)."""
    source = inspect.getsource(module)
    lines = source.splitlines()
    inline = _inline_comments(source)
    found: dict[str, str] = {}
    for node in ast.parse(source).body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)):  # fmt: skip
            continue
        above = _comment_above(lines, node.lineno)
        text = " ".join([above, inline.get(node.lineno, "")]).strip()
        found[node.targets[0].id] = text
    return found
