"""A spec that does not validate, as one line per problem: the field, what is wrong, what
is valid.

pydantic's errors and the targets' own config errors (targets import nothing of ours, so
their ``ValueError``s are translated here) become ``Problem``s; ``spec_error`` writes them
under the spec file's name, except those a ``--set`` caused, which name the flag instead.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ValidationError

from moeperf.suites.errors import SpecError
from moeperf.suites.spec_overrides import SpecKey, blame
from moeperf.targets.synthetic.config import SyntheticConfig, SyntheticConfigError

# The error type of a validator whose input may be a secret (an API key written where its
# variable's name belongs, a header value): its message is shown without the input.
NO_ECHO = "moeperf_no_echo"


@dataclass(frozen=True)
class Problem:
    """What is wrong (``message``) where (``where``, dotted as printed); ``keys`` are the
    spec keys it concerns, to tell whether an override caused it."""

    where: str
    keys: tuple[SpecKey, ...]
    message: str


def _dotted(key: SpecKey) -> str:
    return ".".join(key) or "(top level)"


def unknown_field(key: SpecKey, valid: Sequence[str]) -> Problem:
    """``key`` is not a field; the closest valid one is suggested, and all are listed."""
    close = difflib.get_close_matches(key[-1], valid, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return Problem(_dotted(key), (key,), f"unknown field{hint} valid fields: {', '.join(valid)}")


def _nested_fields(model: type[BaseModel], location: SpecKey) -> list[str]:
    """The valid field names at ``location`` in the spec model tree."""
    for part in location:
        if part.isdigit():  # an index into a list of tables: its items' fields
            continue
        field = model.model_fields.get(part)
        annotation = getattr(field, "annotation", None)
        if typing.get_origin(annotation) is list:
            annotation = typing.get_args(annotation)[0]
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return []
        model = annotation
    return list(model.model_fields)


def synthetic_problems(table: SpecKey, error: SyntheticConfigError) -> list[Problem]:
    """The synthetic target's own verdict on the table at ``table`` (its ``fields`` named
    under it: ``target.synthetic.error_rate + stall_rate + ...: must be <= 1``)."""
    if error.unknown:
        valid = [field.name for field in dataclasses.fields(SyntheticConfig)]
        return [unknown_field((*table, name), valid) for name in error.fields]
    if not error.fields:
        return [Problem(_dotted(table), (table,), str(error))]
    keys = tuple((*table, name) for name in error.fields)
    return [Problem(_dotted((*table, " + ".join(error.fields))), keys, error.problem)]


def problems_of(
    error: ValidationError, root: type[BaseModel], prefix: SpecKey = ()
) -> list[Problem]:
    """pydantic's errors for ``root``, a model found at ``prefix`` in the spec."""
    problems: list[Problem] = []
    for item in error.errors():
        location = tuple(str(part) for part in item["loc"])
        key = prefix + location
        cause = (item.get("ctx") or {}).get("error")
        if isinstance(cause, SyntheticConfigError):
            problems += synthetic_problems(key, cause)
        elif item["type"] == "extra_forbidden":
            problems.append(unknown_field(key, _nested_fields(root, location[:-1])))
        elif item["type"] == "missing":
            problems.append(Problem(_dotted(key), (key,), "required field is missing"))
        elif item["type"] == NO_ECHO:  # the value may be a secret: not repeated
            problems.append(Problem(_dotted(key), (key,), item["msg"]))
        else:
            message = item["msg"].removeprefix("Value error, ")
            got = f"{message} (got {item.get('input')!r})"
            problems.append(Problem(_dotted(key), (key,), got))
    return problems


def spec_error(
    source: str, problems: Sequence[Problem], overrides: Sequence[str] = ()
) -> SpecError:
    """One ``SpecError`` for all of ``problems``: those of the file under ``source``, then
    one line per problem an override caused, starting with the flag and its value."""
    in_file: list[str] = []
    by_flags: list[str] = []
    for problem in problems:
        culprits = blame(overrides, problem.keys)
        if not culprits:
            in_file.append(f"  {problem.where}: {problem.message}")
            continue
        flags = ", ".join(override.shown for override in culprits)
        exact = len(culprits) == 1 and problem.keys == (culprits[0].path,)
        where = "" if exact else f" {problem.where}:"
        by_flags.append(f"{flags}:{where} {problem.message}")
    head = [f"{source}: invalid spec", *in_file] if in_file else []
    return SpecError("\n".join(head + by_flags))
