"""A field's type and constraints in words a spec's reader uses (TOML, not Python)."""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from typing import Any

import annotated_types
from pydantic import BaseModel

_NAMES = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "unset"}


def type_text(annotation: Any) -> str:
    """``list[Annotated[float, Field(gt=0)]] | None`` -> ``list of number (> 0), or unset``."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _with_constraints(type_text(args[0]), args[1:])
    if origin in (typing.Union, types.UnionType):
        parts = [type_text(a) for a in args if a is not type(None)]
        text = " or ".join(dict.fromkeys(parts))
        return text + ", or unset" if type(None) in args else text
    if origin is typing.Literal:
        return "one of " + ", ".join(_literal(a) for a in args)
    if origin in (list, tuple, set, frozenset):
        inner = [a for a in args if a is not Ellipsis]
        return "list of " + (type_text(inner[0]) if inner else "values")
    if origin is dict:
        return f"table of {type_text(args[1])}" if args else "table"
    if isinstance(annotation, type):
        if issubclass(annotation, BaseModel) or dataclasses.is_dataclass(annotation):
            return "table"
        if issubclass(annotation, enum.Enum):
            return "one of " + ", ".join(_literal(m.value) for m in annotation)
        return _NAMES.get(annotation, annotation.__name__)
    return str(annotation).replace("typing.", "")


def constraints_text(metadata: list[Any]) -> str:
    """pydantic FieldInfo metadata (Gt, Ge, Le, MinLen, ...) as ``> 0, <= 1``."""
    return ", ".join(t for t in (_constraint(m) for m in metadata) if t)


def _with_constraints(text: str, metadata: tuple[Any, ...]) -> str:
    found = []
    for m in metadata:
        # pydantic's Field(...) inside Annotated: its own metadata holds the constraints.
        found += list(getattr(m, "metadata", [m]))
    extra = constraints_text(found)
    return f"{text} ({extra})" if extra else text


def _constraint(m: Any) -> str:
    if isinstance(m, annotated_types.Gt):
        return f"> {m.gt}"
    if isinstance(m, annotated_types.Ge):
        return f">= {m.ge}"
    if isinstance(m, annotated_types.Lt):
        return f"< {m.lt}"
    if isinstance(m, annotated_types.Le):
        return f"<= {m.le}"
    if isinstance(m, annotated_types.MinLen):
        return f"at least {m.min_length} item{'s' if m.min_length != 1 else ''}"
    if isinstance(m, annotated_types.MaxLen):
        return f"at most {m.max_length}"
    pattern = getattr(m, "pattern", None)
    return f"matching {pattern}" if isinstance(pattern, str) else ""


def _literal(value: object) -> str:
    return f'"{value}"' if isinstance(value, str) else toml_value(value)


def toml_value(value: object) -> str:
    """A default as it would be written in a spec file."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, float):
        return f"{value:g}" if abs(value) >= 1e-4 or value == 0 else repr(value)
    if isinstance(value, enum.Enum):
        return toml_value(value.value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + "}"
    return str(value)
