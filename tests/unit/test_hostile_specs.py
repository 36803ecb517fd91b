"""Hostile input to the spec loader and the CLI: whatever a spec file or a ``--set`` holds,
the answer is a valid spec or a clear message (a ``MoeperfUsageError``: exit code 2), never a
traceback. Hypothesis mutates the shipped specs (values of every TOML type at any depth,
keys dropped or added, several at once), writes arbitrary bytes as spec files, and tries
arbitrary overrides."""

from __future__ import annotations

import copy
import tomllib
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moeperf.cli import main
from moeperf.collectors.errors import MoeperfUsageError
from moeperf.specs import load_spec, validate_spec
from moeperf.suites.errors import SpecError
from moeperf.suites.spec_files import SPEC_DIR

SHIPPED = {p.stem: tomllib.loads(p.read_text()) for p in sorted(SPEC_DIR.glob("*.toml"))}
FUZZ = settings(
    max_examples=150, deadline=None, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.too_slow],
)  # fmt: skip

# What a TOML value can be (TOML has no null), hostile ones included: huge and negative
# integers, inf and nan, empty and long and odd strings, nested containers.
SCALARS = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.sampled_from([0, -1, 1, 10**9]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(["", "none", "../../etc/passwd", "a" * 500, "-1", "1e309"]),
    st.booleans(),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=5,
)


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    found: list[tuple] = []
    items = (
        node.items()
        if isinstance(node, dict)
        else enumerate(node)
        if isinstance(node, list)
        else []
    )
    for key, child in items:
        found.append((*prefix, key))
        found += _paths(child, (*prefix, key))
    return found


def _validates_or_says_why(data: Any, source: str, overrides: list[str] | None = None) -> None:
    try:
        validate_spec(data, source, overrides or [])
    except MoeperfUsageError as exc:
        assert str(exc).strip(), "an empty message"


@FUZZ
@given(name=st.sampled_from(sorted(SHIPPED)), data=st.data())
def test_a_mutated_shipped_spec_is_valid_or_refused_with_a_message(name, data):
    spec = copy.deepcopy(SHIPPED[name])
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        paths = _paths(spec)
        if not paths:
            break
        path = data.draw(st.sampled_from(paths), label="path")
        parent = spec
        for key in path[:-1]:
            parent = parent[key]
        action = data.draw(st.sampled_from(["replace", "drop", "add"]), label="action")
        if action == "drop" and isinstance(parent, dict):
            del parent[path[-1]]
        elif action == "add" and isinstance(parent, dict):
            parent[data.draw(st.text(min_size=1, max_size=12), label="new key")] = data.draw(VALUES)
        else:
            parent[path[-1]] = data.draw(VALUES, label="value")
    _validates_or_says_why(spec, f"{name}.toml")


@FUZZ
@given(raw=st.binary(max_size=200))
def test_any_bytes_as_a_spec_file_are_refused_with_a_message(tmp_path_factory, raw):
    path = tmp_path_factory.mktemp("spec") / "spec.toml"
    path.write_bytes(raw)
    try:
        load_spec(str(path))
    except SpecError as exc:
        assert str(path) in str(exc)


@FUZZ
@given(overrides=st.lists(st.text(max_size=30), min_size=1, max_size=3))
def test_any_override_is_applied_or_refused_with_a_message(overrides):
    _validates_or_says_why(copy.deepcopy(SHIPPED["default"]), "default.toml", overrides)


def test_a_spec_that_is_not_utf8_is_a_usage_error(tmp_path, capsys):
    path = tmp_path / "spec.toml"
    path.write_bytes(b"\xff\xfe name = 1")
    assert main(["--runs-dir", str(tmp_path / "runs"), "run", str(path)]) == 2
    err = capsys.readouterr().err
    assert "not UTF-8 text" in err and "Traceback" not in err


@pytest.mark.parametrize("command", [["runs", "list"], ["run", "default"]])
def test_a_runs_dir_that_is_a_file_is_a_usage_error(tmp_path, capsys, command):
    not_a_dir = tmp_path / "runs"
    not_a_dir.write_text("")
    assert main(["--runs-dir", str(not_a_dir), *command]) == 2
    assert "is a file, not a directory" in capsys.readouterr().err
