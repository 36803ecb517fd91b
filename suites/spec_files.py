"""Spec files: where a spec is, reading its TOML, and ``extend``.

Nothing here knows a suite: this module turns a name or a path into the data a suite's
spec model validates (moeperf/specs.py picks the model through the suite registry).

A spec may extend another: ``extend = "soak"`` (a shipped spec's name, or a path relative to
the extending file) takes that spec's data and overrides it with this file's. Tables merge
key by key, any other value (a list included) is replaced whole, and an empty table
(``reference = {}``) clears the one it extends, so a ``-full`` spec holds only what
differs from the spec it scales up.
"""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from moeperf.suites.errors import SpecError

SPEC_DIR = Path(__file__).parent / "specs"
EXTEND_KEY = "extend"


def shipped_spec_names() -> list[str]:
    """The names of the specs shipped in suites/specs/, sorted."""
    return sorted(p.stem for p in SPEC_DIR.glob("*.toml"))


def resolve_spec_path(name_or_path: str) -> Path:
    """A path to a TOML file, or the name of a spec shipped in suites/specs/."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    shipped = SPEC_DIR / f"{name_or_path}.toml"
    if shipped.is_file():
        return shipped
    names = shipped_spec_names()
    close = difflib.get_close_matches(path.stem, names, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise SpecError(f"no spec file {name_or_path!r}{hint}; shipped specs: {', '.join(names)}")


def read_spec_file(path: Path) -> dict[str, Any]:
    """The data of the spec file at ``path``, with what it extends merged under it."""
    return _read(path, ())


def _read(path: Path, chain: tuple[Path, ...]) -> dict[str, Any]:
    data = _toml(path)
    base = data.pop(EXTEND_KEY, None)
    if base is None:
        return data
    if not isinstance(base, str) or not base:
        raise SpecError(f"{path}: {EXTEND_KEY} is the name of a shipped spec or a path to one")
    base_path = _extended_path(base, path)
    resolved = (*chain, path.resolve())
    if base_path.resolve() in resolved:
        loop = " -> ".join(p.name for p in (*resolved, base_path))
        raise SpecError(f"{path}: {EXTEND_KEY} = {base!r} makes a loop ({loop})")
    return merge_spec_data(_read(base_path, resolved), data)


def _extended_path(base: str, extending: Path) -> Path:
    # Relative to the extending file first (a user's spec extending a sibling), then a
    # shipped spec's name.
    beside = extending.parent / base
    if beside.is_file():
        return beside
    try:
        return resolve_spec_path(base)
    except SpecError as exc:
        raise SpecError(f"{extending}: {EXTEND_KEY} = {base!r}: {exc}") from None


def merge_spec_data(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``over`` on top: tables merged key by key, other values replaced. An
    empty table removes the base's table, so it reads as left out (its defaults), as a
    whole spec without that table would."""
    merged = dict(base)
    for key, value in over.items():
        below = merged.get(key)
        if isinstance(value, Mapping) and not value:
            merged.pop(key, None)
        elif isinstance(below, Mapping) and isinstance(value, Mapping):
            merged[key] = merge_spec_data(below, value)
        else:
            merged[key] = value
    return merged


def _toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{path}: not valid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: not UTF-8 text, as TOML must be ({exc.reason} at byte "
                        f"{exc.start}); give a TOML spec file") from None  # fmt: skip
    except OSError as exc:
        raise SpecError(f"{path}: cannot be read ({exc.strerror or exc})") from None


def spec_data_path(path: str) -> Path:
    """Where a file a spec names is: as given (absolute, or relative to the working
    directory), else relative to the shipped specs (``traces/small-mooncake.jsonl``)."""
    given = Path(path).expanduser()
    if given.is_absolute() or given.exists():
        return given
    shipped = SPEC_DIR / given
    return shipped if shipped.exists() else given
