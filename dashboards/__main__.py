"""`python -m moeperf.dashboards generate | check`: write or verify the committed dashboard JSON."""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

from .build import GENERATED_DIR, rendered_files

MAX_DIFF_LINES = 40


def generate(directory: Path) -> list[Path]:
    """Write every dashboard's JSON into `directory`; returns the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in rendered_files().items():
        path = directory / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def check(directory: Path) -> list[str]:
    """A diff summary per file that differs from what `generate` would write (empty: all equal)."""
    problems = []
    for name, expected in rendered_files().items():
        path = directory / name
        if not path.exists():
            problems.append(f"{path}: missing")
            continue
        committed = path.read_text(encoding="utf-8")
        if committed == expected:
            continue
        diff = list(
            difflib.unified_diff(
                committed.splitlines(),
                expected.splitlines(),
                f"{path} (committed)",
                f"{path} (generated)",
                lineterm="",
            )
        )
        body = [line for line in diff if line[:3] not in ("+++", "---")]
        removed = sum(1 for line in body if line.startswith("-"))
        added = sum(1 for line in body if line.startswith("+"))
        shown = "\n".join(diff[:MAX_DIFF_LINES])
        more = (
            f"\n... {len(diff) - MAX_DIFF_LINES} more diff lines"
            if len(diff) > MAX_DIFF_LINES
            else ""
        )
        problems.append(f"{path}: differs (-{removed} +{added} lines)\n{shown}{more}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m moeperf.dashboards", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in (
        ("generate", "write the dashboards' JSON"),
        ("check", "exit 1 when the committed JSON differs from what generate would write"),
    ):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--dir", type=Path, default=GENERATED_DIR, help="default: %(default)s")
    args = parser.parse_args(argv)

    if args.command == "generate":
        for path in generate(args.dir):
            print(f"wrote {path}")
        return 0
    problems = check(args.dir)
    if not problems:
        print(f"dashboards in {args.dir} are up to date")
        return 0
    print("\n\n".join(problems), file=sys.stderr)
    print("\nrun `python -m moeperf.dashboards generate` and commit the result", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
