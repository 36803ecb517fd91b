"""The generated pages: each one's path under docs/ and the function that writes it."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path

# Run from the repository root, as mkdocs is: the pages live in its docs/.
REGENERATE = "python -m moeperf.docs"

# page -> module whose page() writes it; imported only when that page is made.
PAGES: dict[str, str] = {
    "reference/cli.md": "moeperf.docs.cli_page",
    "reference/spec-fields.md": "moeperf.docs.spec_fields",
    "reference/specs.md": "moeperf.docs.shipped_specs",
    "reference/prometheus-metrics.md": "moeperf.docs.prometheus_page",
    "reference/records.md": "moeperf.docs.records_page",
    "reference/exit-codes.md": "moeperf.docs.exit_codes_page",
    "concepts/metrics.md": "moeperf.docs.definitions_page",
}


def render(page: str) -> str:
    """The text of generated page ``page`` (a key of PAGES)."""
    make: Callable[[], str] = importlib.import_module(PAGES[page]).page
    return make()


def stale_pages(docs_dir: Path) -> list[str]:
    """The generated pages whose file differs from what the code makes now."""
    stale = []
    for page in PAGES:
        path = docs_dir / page
        if not path.is_file() or path.read_text(encoding="utf-8") != render(page):
            stale.append(page)
    return stale


def write_pages(docs_dir: Path) -> list[str]:
    """Write every generated page; the pages whose text changed."""
    changed = []
    for page in PAGES:
        path = docs_dir / page
        text = render(page)
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            changed.append(page)
    return changed
