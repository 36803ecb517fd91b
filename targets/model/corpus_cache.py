"""The training corpus kept on disk between processes, so that it is parsed once per machine.

Each trainer process used to parse the standard library again (about 9 s of CPU on a 2-core
host): every ``moeperf run training-*``, every rank's launcher, every test process that
trains. The file is named by a key over what the text is made of (the Python version, and
each file read with its path, size and modification time), so a changed or moved standard
library misses the cache instead of reading stale text; a file whose checksum does not
match its documents is ignored and written again.

Where: ``$MOEPERF_CACHE_DIR``, else ``$XDG_CACHE_HOME/moeperf``, else ``~/.cache/moeperf``.
A directory that cannot be written leaves the corpus uncached, and correct.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

FORMAT = 1  # raise when the file's layout or what the key covers changes


class CachedText(NamedTuple):
    documents: tuple[str, ...]
    sha256: str
    python_version: str


def cache_dir() -> Path:
    if explicit := os.environ.get("MOEPERF_CACHE_DIR"):
        return Path(explicit)
    if xdg := os.environ.get("XDG_CACHE_HOME"):
        return Path(xdg) / "moeperf"
    return Path.home() / ".cache" / "moeperf"


def documents_sha256(documents: Sequence[str]) -> str:
    """The corpus checksum: sha256 of the documents joined by newlines, UTF-8."""
    return hashlib.sha256("\n".join(documents).encode("utf-8")).hexdigest()


def key(files: Sequence[Path], topics_file: Path) -> str:
    """Names the text ``files`` and the help topics make, without reading them."""
    h = hashlib.sha256(f"{FORMAT}\n{sys.version}\n".encode())
    for path in (topics_file, *files):
        stat = path.stat()
        h.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return h.hexdigest()[:32]


def _path(cache_key: str) -> Path:
    return cache_dir() / f"corpus-{cache_key}.json"


def read(cache_key: str) -> CachedText | None:
    """The cached text for ``cache_key``, or None (absent, unreadable or not matching its
    checksum)."""
    try:
        stored = json.loads(_path(cache_key).read_text(encoding="utf-8"))
        text = CachedText(tuple(stored["documents"]), stored["sha256"], stored["python_version"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if documents_sha256(text.documents) != text.sha256:
        return None
    return text


def write(cache_key: str, text: CachedText) -> None:
    """Store ``text`` under ``cache_key``: whole or not at all (another process may be
    writing or reading the same key)."""
    path = _path(cache_key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    except OSError:
        return  # an unwritable cache: the next process parses again
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(text._asdict(), out)
        os.replace(tmp, path)
    except OSError:
        Path(tmp).unlink(missing_ok=True)
