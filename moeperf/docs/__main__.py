"""``python -m moeperf.docs``: write the generated reference pages; ``--check``: exit 1
when one is out of date (what CI and tests/unit/test_docs_reference.py run)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from moeperf.docs.pages import REGENERATE, stale_pages, write_pages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=REGENERATE, description=__doc__)
    parser.add_argument("--check", action="store_true", help="only say which pages are stale")
    parser.add_argument(
        "--docs-dir", type=Path, default=Path("docs"), help="the site's pages (default: docs)"
    )
    args = parser.parse_args(argv)
    if not (args.docs_dir / "index.md").is_file():
        print(f"{args.docs_dir}/index.md not found: run this from the repository root, or "
              "give --docs-dir", file=sys.stderr)  # fmt: skip
        return 2
    if args.check:
        stale = stale_pages(args.docs_dir)
        for page in stale:
            print(f"out of date: docs/{page}", file=sys.stderr)
        if stale:
            print(f"regenerate with: {REGENERATE}", file=sys.stderr)
        return 1 if stale else 0
    changed = write_pages(args.docs_dir)
    print(f"{len(changed)} of the generated pages changed: " + (", ".join(changed) or "none"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
