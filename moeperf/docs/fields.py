"""The fields of a pydantic model or a dataclass, in one shape for the generated pages."""

from __future__ import annotations

import dataclasses
import importlib
import typing
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

REQUIRED = object()


@dataclass(frozen=True)
class FieldDoc:
    """One field: its name, annotation, default (``REQUIRED`` when none) and constraints."""

    name: str
    annotation: Any
    default: Any
    metadata: tuple[Any, ...] = ()
    # pydantic's Field(description=...), where a model gives one.
    description: str = ""


def is_table(cls: object) -> bool:
    """A class the pages document field by field: a pydantic model or a dataclass."""
    return isinstance(cls, type) and (issubclass(cls, BaseModel) or dataclasses.is_dataclass(cls))


def fields_of(cls: type) -> list[FieldDoc]:
    """``cls``'s fields in declaration order."""
    found: list[FieldDoc] = []
    if issubclass(cls, BaseModel):
        for name, info in cls.model_fields.items():
            value = (REQUIRED if info.is_required()
                     else info.get_default(call_default_factory=True))  # fmt: skip
            found.append(FieldDoc(name, info.annotation,
                                  REQUIRED if value is PydanticUndefined else value,
                                  tuple(info.metadata), info.description or ""))  # fmt: skip
        return found
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(typing.cast(Any, cls)):
        if f.default is not dataclasses.MISSING:
            default: Any = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = REQUIRED
        found.append(FieldDoc(f.name, hints[f.name], default))
    return found


def documented_tables(cls: type) -> dict[str, type]:
    """Fields whose type is a free-form table checked elsewhere, and the class that checks
    them, as the class declares in ``documented_tables`` ({field: "module:Class"})."""
    declared: dict[str, str] = getattr(cls, "documented_tables", {})
    found = {}
    for name, path in declared.items():
        module, _, attribute = path.partition(":")
        found[name] = getattr(importlib.import_module(module), attribute)
    return found


def nested_table(annotation: Any) -> tuple[type, bool] | None:
    """The table class a field holds (``T``, ``T | None``, ``list[T]``) and whether it is
    a list of them; None for any other field."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return nested_table(args[0])
    if is_table(annotation):
        return annotation, False
    if origin in (list, tuple):
        inner = nested_table(args[0]) if args else None
        return (inner[0], True) if inner else None
    if args and origin is not dict:
        tables = [t for t in (nested_table(a) for a in args) if t is not None]
        return tables[0] if len(tables) == 1 else None
    return None
