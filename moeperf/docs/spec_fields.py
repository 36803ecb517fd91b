"""reference/spec-fields.md: every field of every suite's spec, from the spec models.

The suites come from the registry (each one's validator returns its spec model); each
table of a spec (a nested model) gets a section named by its TOML path. Types and
constraints come from the annotations, defaults from the models, units from the field
names, descriptions from the comments beside the fields.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass

from moeperf.docs.field_comments import field_comments
from moeperf.docs.fields import (
    REQUIRED,
    FieldDoc,
    documented_tables,
    fields_of,
    is_table,
    nested_table,
)
from moeperf.docs.markdown import GENERATED, code, paragraphs, table
from moeperf.docs.type_text import constraints_text, toml_value, type_text
from moeperf.docs.units import unit_of
from moeperf.registry import SUITES


@dataclass(frozen=True)
class Table:
    """One TOML table of a spec: its path (``load``, ``[drill.faults]``) and model."""

    path: str
    model: type
    array: bool  # [[path]]: a list of such tables


def suite_spec_models() -> list[tuple[str, type]]:
    """(suite name, spec model) for every suite a spec may name, in registry order."""
    found = []
    for suite in SUITES:
        if suite.validate is None:
            continue
        model = typing.get_type_hints(suite.validate.load())["return"]
        found.append((suite.name, model))
    return found


def tables(model: type, path: str = "", array: bool = False) -> list[Table]:
    """The model's table and every table nested in it, depth first, in field order."""
    found = [Table(path, model, array)]
    free_form = documented_tables(model)
    for f in fields_of(model):
        sub = f"{path}.{f.name}" if path else f.name
        nested = nested_table(f.annotation)
        if nested is not None:
            found += tables(nested[0], sub, nested[1])
        elif f.name in free_form:
            found += tables(free_form[f.name], sub)
    return found


def page() -> str:
    parts = [
        "# Spec fields\n\n",
        GENERATED,
        "\nEvery field a spec file may set, suite by suite, read from the spec models "
        "(the suite registry names each suite's model). A spec is a TOML file; each "
        "section below is one of its tables. *Default* is what applies when the field is "
        "left out; *unit* comes from the field's name. `--set KEY=VALUE` sets the same "
        "fields by their dotted path (`--set load.levels=[1,8]`). A wrong field or value "
        "is refused before any load is sent, with the valid choices, exit code 2.\n",
    ]
    # A table class met again (accuracy's [target] is serving's) links to its first section.
    seen: dict[type, tuple[str, str]] = {}
    for suite, model in suite_spec_models():
        parts.append(f'\n## `suite = "{suite}"` {{#{suite}}}\n\n')
        parts.append(paragraphs(model.__doc__))
        for t in tables(model):
            parts.append(_section(suite, t, seen))
    return "".join(parts)


def _section(suite: str, t: Table, seen: dict[type, tuple[str, str]]) -> str:
    name = "top level" if not t.path else (
        f"`{'[[' + t.path + ']]' if t.array else '[' + t.path + ']'}`"
    )  # fmt: skip
    anchor = f"{suite}-{t.path.replace('.', '-')}" if t.path else f"{suite}-top"
    heading = f"\n### {suite}: {name} {{#{anchor}}}\n\n"
    if t.model in seen:
        return heading + f"The same fields as [{seen[t.model][1]}](#{seen[t.model][0]}).\n"
    seen[t.model] = (anchor, f"{suite}: {name}")
    doc = paragraphs(t.model.__doc__) if t.path and t.model.__doc__ else ""
    comments = field_comments(t.model, *getattr(t.model, "documented_by", ()))
    rows = [
        (
            code(f.name),
            _type(f),
            _default(f.default),
            unit_of(f.name),
            comments.get(f.name) or f.description,
        )
        for f in fields_of(t.model)
    ]
    return (
        heading
        + (doc + "\n" if doc else "")
        + table(("field", "type", "default", "unit", "description"), rows)
    )


def _type(f: FieldDoc) -> str:
    text = type_text(f.annotation)
    extra = constraints_text(list(f.metadata))
    return f"{text} ({extra})" if extra else text


def _default(value: object) -> str:
    if value is REQUIRED:
        return "required"
    if is_table(type(value)):
        return "its defaults"
    if isinstance(value, list) and value and is_table(type(value[0])):
        return f"{len(value)} tables"
    return code(toml_value(value))
