"""The shape of moeperf's imports: no module imports itself back through others (grimp, the
graph import-linter checks its layers on, lists every import, those inside functions and
under TYPE_CHECKING included), and a command imports what it uses: the CLI loads no suite,
no pandas, scipy or torch before a command needs them (benchmarks/cli_startup.py times it).
"""

from __future__ import annotations

import subprocess
import sys

import grimp


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Groups of modules that import each other, directly or through others."""
    modules = set(graph.modules)
    edges = {m: graph.find_modules_directly_imported_by(m) & modules for m in modules}
    reach: dict[str, set[str]] = {}
    for start in modules:
        seen: set[str] = set()
        todo = [start]
        while todo:
            for nxt in edges[todo.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        reach[start] = seen
    groups, grouped = [], set()
    for module in sorted(modules):
        if module in grouped or module not in reach[module]:
            continue
        group = sorted(m for m in reach[module] if module in reach[m])
        grouped.update(group)
        groups.append(group)
    return groups


def test_no_module_of_moeperf_is_in_an_import_cycle():
    graph = grimp.build_graph("moeperf")
    assert len(graph.modules) > 300  # the linked folders are walked too
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    graph = grimp.ImportGraph()
    for name in ("p", "p.a", "p.b", "p.c"):
        graph.add_module(name)
    graph.add_import(importer="p.a", imported="p.b")
    graph.add_import(importer="p.b", imported="p.c")
    graph.add_import(importer="p.c", imported="p.a")
    assert _cycles(graph) == [["p.a", "p.b", "p.c"]]


HEAVY = ("pandas", "pyarrow", "scipy", "torch", "numpy", "plotly", "aiohttp")


def _loaded(code: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys; print(' '.join(sys.modules))"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return set(done.stdout.split())


def test_the_cli_imports_no_suite_and_no_heavy_library():
    loaded = _loaded("import moeperf.cli")
    assert not {m for m in loaded if m.split(".")[0] in HEAVY}
    assert not {m for m in loaded if m.startswith(("moeperf.reports", "moeperf.targets"))}
    assert "moeperf.registry" not in loaded  # `moeperf --help` needs no suite


def test_runs_list_reads_manifests_without_pandas(tmp_path):
    code = (
        "from moeperf.cli import main\n"
        f"assert main(['--runs-dir', {str(tmp_path)!r}, 'runs', 'list']) == 0"
    )
    loaded = _loaded(code)
    assert not {m for m in loaded if m.split(".")[0] in HEAVY}
