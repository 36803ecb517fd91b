"""Spec files (suites/spec_files.py): ``extend`` merges a spec over the one it names."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from moeperf.specs import load_spec
from moeperf.suites.errors import SpecError
from moeperf.suites.spec_files import SPEC_DIR, merge_spec_data, read_spec_file


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_tables_merge_key_by_key_and_other_values_are_replaced():
    base = {"name": "a", "load": {"levels": [1, 2], "duration_s": 5.0}, "target": {"x": {"k": 1}}}
    over = {"name": "b", "load": {"levels": [8]}, "target": {"x": {}}}
    merged = merge_spec_data(base, over)
    assert merged == {"name": "b", "load": {"levels": [8], "duration_s": 5.0}, "target": {}}
    assert base["load"] == {"levels": [1, 2], "duration_s": 5.0}  # left as it was


def test_a_spec_extends_a_shipped_one_by_name(tmp_path):
    path = write(
        tmp_path / "mine.toml",
        'extend = "synthetic"\nname = "mine"\n[load]\nlevels = [3]\n',
    )
    data = read_spec_file(path)
    shipped = tomllib.loads((SPEC_DIR / "synthetic.toml").read_text())
    assert "extend" not in data
    assert data["name"] == "mine" and data["load"]["levels"] == [3]
    assert data["target"] == shipped["target"]
    assert {k: v for k, v in data["load"].items() if k != "levels"} == {
        k: v for k, v in shipped["load"].items() if k != "levels"
    }
    assert load_spec(str(path)).serving.load.levels == [3.0]


def test_a_spec_extends_a_file_beside_it_and_chains(tmp_path):
    write(tmp_path / "base.toml", 'extend = "synthetic"\nname = "base"\n[load]\nlevels = [2]\n')
    path = write(tmp_path / "top.toml", 'extend = "base.toml"\nname = "top"\n')
    data = read_spec_file(path)
    assert data["name"] == "top" and data["load"]["levels"] == [2]


def test_a_loop_and_an_unknown_base_are_spec_errors(tmp_path):
    write(tmp_path / "a.toml", 'extend = "b.toml"\nname = "a"\n')
    write(tmp_path / "b.toml", 'extend = "a.toml"\nname = "b"\n')
    with pytest.raises(SpecError, match=r"makes a loop \(a.toml -> b.toml -> a.toml\)"):
        read_spec_file(tmp_path / "a.toml")
    path = write(tmp_path / "c.toml", 'extend = "nopes"\nname = "c"\n')
    with pytest.raises(SpecError, match="extend = 'nopes': no spec file 'nopes'"):
        read_spec_file(path)
    path = write(tmp_path / "d.toml", "extend = 3\n")
    with pytest.raises(SpecError, match="extend is the name of a shipped spec or a path"):
        read_spec_file(path)


# The -full specs that extend their CI-sized spec, and what each changes.
FULL = {
    "long-context-full": "long-context",
    "mtp-ab-full": "mtp-ab",
    "prefill-full": "prefill",
    "multi-turn-full": "multi-turn",
    "prefix-reuse-full": "prefix-reuse",
    "trace-replay-full": "trace-replay",
}


@pytest.mark.parametrize("full", sorted(FULL))
def test_a_full_spec_holds_only_what_differs_from_the_one_it_extends(full):
    own = tomllib.loads((SPEC_DIR / f"{full}.toml").read_text())
    assert own["extend"] == FULL[full]
    base = read_spec_file(SPEC_DIR / f"{FULL[full]}.toml")
    merged = read_spec_file(SPEC_DIR / f"{full}.toml")
    # Every table it sets changes something: nothing is restated at the base's value.
    for table, values in own.items():
        if table != "extend":
            assert values != base.get(table), (full, table)
    assert merged["target"]["api"] == base["target"]["api"]  # inherited
    spec = load_spec(full).serving  # and the whole validates as before
    assert spec.name == full
