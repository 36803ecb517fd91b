"""Where a secret was written: every file under a directory, read as bytes and decoded.

Importable as ``secret_scan`` (pytest's default "prepend" import mode puts this directory,
which has no ``__init__.py``, on ``sys.path``, as for ``loopback``). A Parquet file is compressed,
so its bytes alone could hide a secret: its cells are read too, as is a gzip file's
content. Tests that use it prove it can find one (a positive control).
"""

from __future__ import annotations

import gzip
from collections.abc import Mapping
from pathlib import Path

import pyarrow.parquet as pq


def _contents(path: Path) -> list[bytes]:
    """The file's bytes, and what they decode to where they are compressed."""
    raw = path.read_bytes()
    found = [raw]
    if path.suffix == ".parquet":
        found.append(repr(pq.read_table(path).to_pylist()).encode())
    elif path.suffix == ".gz":
        found.append(gzip.decompress(raw))
    return found


def files_holding(secret: str, root: Path) -> list[str]:
    """The files under ``root`` (relative paths) that hold ``secret`` anywhere."""
    needle = secret.encode()
    return sorted(
        str(path.relative_to(root))
        for path in root.rglob("*")
        if path.is_file() and any(needle in content for content in _contents(path))
    )


def texts_holding(secret: str, texts: Mapping[str, str]) -> list[str]:
    """The names of ``texts`` (captured output, say) that hold ``secret``."""
    return sorted(name for name, text in texts.items() if secret in text)
