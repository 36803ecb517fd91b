"""CLI handlers that reach into reports/: reports, comparisons, baselines, the gate.

The CLI composes packages, so these handlers (and only they, with suites.gate_runs) may
import reports; the import contract in pyproject.toml states the exception. Imports are
lazy so that `moeperf run` does not load plotly.
"""

from __future__ import annotations

import argparse

from rich.console import Console


def _out(console: Console):
    return lambda line: console.print(line, markup=False, highlight=False)


def baseline_promote(args: argparse.Namespace, console: Console) -> int:
    from reports.baselines import promote_command

    return promote_command(
        args.run, args.name, args.version, args.runs_dir, args.baselines_dir, args.force,
        out=_out(console),
    )  # fmt: skip


def baseline_list(args: argparse.Namespace, console: Console) -> int:
    from reports.baselines import list_command

    return list_command(args.baselines_dir, out=_out(console))


def baseline_show(args: argparse.Namespace, console: Console) -> int:
    from reports.baselines import show_command

    return show_command(args.ref, args.baselines_dir, out=_out(console))


def add_baseline_commands(commands, common: argparse.ArgumentParser) -> None:
    baseline = commands.add_parser("baseline", help="versioned baselines under reports/baselines/")
    sub = baseline.add_subparsers(dest="baseline_command", required=True)
    promote = sub.add_parser("promote", parents=[common], help="copy a run into a new version")
    promote.add_argument("run", help="run id, unique prefix, directory, or 'latest'")
    promote.add_argument("--name", required=True, help="baseline name, e.g. nightly")
    promote.add_argument("--version", type=int, help="explicit version (default: next)")
    promote.add_argument(
        "--force", action="store_true", help="allow an aborted or invalid run (recorded)"
    )
    promote.set_defaults(handler=baseline_promote)
    listing = sub.add_parser("list", parents=[common], help="every baseline and its versions")
    listing.set_defaults(handler=baseline_list)
    show = sub.add_parser("show", parents=[common], help="one version: NAME or NAME@V")
    show.add_argument("ref")
    show.set_defaults(handler=baseline_show)
