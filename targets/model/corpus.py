"""The training text: English prose that every CPython installation carries.

Two sources, both read without importing anything they describe:

- ``pydoc_data.topics.topics``: the language reference's help topics (``help("if")``), all
  values in key order;
- the docstrings (module, class, function) of the standard library's pure-Python modules,
  parsed with ``ast`` from the files under sysconfig's ``stdlib`` path, in sorted path order.

Test packages, site-packages and build configuration are skipped: they are code, not prose,
or they differ between machines. The text depends on the Python version, so a recipe records
that version next to the corpus's sha256.
"""

from __future__ import annotations

import ast
import sys
import sysconfig
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from moeperf.targets.model import corpus_cache

# Directory names under the stdlib whose files are not the library's own prose: test suites
# (test/, tests/, idlelib/idle_test/), third-party packages, and build configuration.
SKIPPED_DIRS = frozenset({"test", "tests", "idle_test", "site-packages", "dist-packages"})
SKIPPED_DIR_PREFIXES = ("config-",)  # config-3.11-x86_64-linux-gnu: the build's Makefile etc.
SKIPPED_FILE_PREFIXES = ("_sysconfigdata",)  # one per platform


@dataclass(frozen=True)
class Corpus:
    documents: tuple[str, ...]
    sha256: str  # of the documents joined by "\n" (UTF-8): names the exact text trained on
    python_version: str  # the text comes from this interpreter's standard library

    @property
    def num_chars(self) -> int:
        return sum(len(d) for d in self.documents)


def stdlib_files(stdlib_dir: Path | None = None) -> list[Path]:
    """The standard library's ``.py`` files worth reading, in sorted (deterministic) order."""
    root = Path(stdlib_dir or sysconfig.get_paths()["stdlib"])
    files = []
    for path in root.rglob("*.py"):
        parts = path.relative_to(root).parts
        dirs, name = parts[:-1], parts[-1]
        if any(d in SKIPPED_DIRS or d.startswith(SKIPPED_DIR_PREFIXES) for d in dirs):
            continue
        if any(d.startswith((".", "__pycache__")) for d in dirs):
            continue
        if name.startswith(SKIPPED_FILE_PREFIXES) or name.startswith("test_"):
            continue
        files.append(path)
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def docstrings(source: str) -> list[str]:
    """Module, class and function docstrings of one source file, in source order."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # lib2to3's grammar fixtures and the like
        return []
    nodes = [tree] + [
        node
        for node in ast.walk(tree)
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
    ]
    # ast.walk is breadth-first; source order reads better and is just as deterministic.
    nodes.sort(key=lambda n: getattr(n, "lineno", 0))
    found = []
    for node in nodes:
        doc = ast.get_docstring(node, clean=True)
        if doc and doc.strip():
            found.append(doc.strip())
    return found


@lru_cache(maxsize=2)  # the text never changes in a process
def load_corpus(stdlib_dir: Path | None = None) -> Corpus:
    """The documents (help topics first, then one per stdlib file with any docstrings).

    Parsing ~700 files takes about 9 s on a 2-core host, in every process that trains; the
    result is kept on disk (targets/model/corpus_cache.py), keyed by the exact files read,
    and used only while those files and its own checksum are unchanged.
    """
    files = stdlib_files(stdlib_dir)
    key = corpus_cache.key(files, _topics_file())
    cached = corpus_cache.read(key)
    if cached is not None:
        return Corpus(*cached)
    corpus = parse_corpus(files)
    text = corpus_cache.CachedText(corpus.documents, corpus.sha256, corpus.python_version)
    corpus_cache.write(key, text)
    return corpus


def parse_corpus(files: list[Path]) -> Corpus:
    """The corpus read from ``files`` (``stdlib_files()``), help topics first; no cache."""
    from pydoc_data.topics import topics  # data only: a dict of strings

    documents = [topics[key].strip() for key in sorted(topics) if topics[key].strip()]
    for path in files:
        try:
            source = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        docs = docstrings(source)
        if docs:
            documents.append("\n\n".join(docs))
    version = ".".join(str(v) for v in sys.version_info[:3])
    sha256 = corpus_cache.documents_sha256(documents)
    return Corpus(documents=tuple(documents), sha256=sha256, python_version=version)


def _topics_file() -> Path:
    import pydoc_data.topics

    return Path(pydoc_data.topics.__file__)
