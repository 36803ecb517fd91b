"""CLI handlers that reach into reports/: reports, comparisons, baselines, the gate.

moeperf/ is the composition layer (the import contract's top layer), so these handlers
may import reports. Imports are lazy so that `moeperf run` does not load plotly.
"""

from __future__ import annotations

import argparse

from rich.console import Console

from moeperf.suites.errors import UsageError
from moeperf.suites.plain_lines import plain_lines

# Pages never replace a file at their default path unless asked (reports/page_path.py).
FORCE_HELP = "replace an existing page at the default path (--out FILE always replaces FILE)"


def baseline_promote(args: argparse.Namespace, console: Console) -> int:
    from moeperf.reports.baseline_commands import promote_command

    return promote_command(
        args.run, args.name, args.version, args.runs_dir, args.baselines_dir, args.force,
        out=plain_lines(console),
    )  # fmt: skip


def baseline_list(args: argparse.Namespace, console: Console) -> int:
    from moeperf.reports.baseline_commands import list_command

    return list_command(args.baselines_dir, out=plain_lines(console))


def baseline_show(args: argparse.Namespace, console: Console) -> int:
    from moeperf.reports.baseline_commands import show_command

    return show_command(args.ref, args.baselines_dir, out=plain_lines(console))


def baseline_report(args: argparse.Namespace, console: Console) -> int:
    from moeperf.reports.baseline_report import baseline_report_command

    return baseline_report_command(
        args.ref, args.baselines_dir, args.out, print_fn=plain_lines(console),
        runs_dir=args.runs_dir, force=args.force, plotlyjs=args.plotlyjs,
    )  # fmt: skip


def add_baseline_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    baseline = commands.add_parser("baseline", help="versioned baselines under reports/baselines/")
    sub = baseline.add_subparsers(dest="baseline_command", required=True)
    promote = sub.add_parser("promote", parents=[common], help="copy a run into a new version")
    promote.add_argument("run", help="run id, unique prefix, directory, or 'latest'")
    promote.add_argument("--name", required=True, help="baseline name, e.g. nightly")
    promote.add_argument("--version", type=int, help="explicit version (default: next)")
    promote.add_argument(
        "--force",
        action="store_true",
        help="allow a run that is aborted, invalid or failed, has a level not ok, "
        "failed its stored gate, or ran another spec than the baseline's last version "
        "(recorded in baseline.json)",
    )
    promote.set_defaults(handler=baseline_promote)
    listing = sub.add_parser("list", parents=[common], help="every baseline and its versions")
    listing.set_defaults(handler=baseline_list)
    show = sub.add_parser("show", parents=[common], help="one version: NAME or NAME@V")
    show.add_argument("ref")
    show.set_defaults(handler=baseline_show)
    page = sub.add_parser(
        "report", parents=[common], help="HTML: the trend across versions, then NAME[@V]"
    )
    page.add_argument("ref", metavar="NAME[@V]")
    _page_flags(page, "RUNS_DIR/baseline-NAME-vV-report.html")
    page.set_defaults(handler=baseline_report)


def gate(args: argparse.Namespace, console: Console) -> int:
    """`gate RUN --baseline NAME[@V]`, `gate --paired SPEC --a A --b B`, `gate calibrate`."""
    out = plain_lines(console)
    positional = list(args.target)
    if positional[:1] == ["calibrate"]:
        from moeperf.gate_calibration import calibrate_command

        spec = positional[1] if len(positional) > 1 else "default"
        return calibrate_command(
            spec, args.pairs, args.runs_dir, args.set or [], args.out_dir, out=out
        )
    if args.paired:
        if positional or not (args.a and args.b):
            raise UsageError("gate --paired SPEC needs --a TARGET and --b TARGET and no RUN")
        from moeperf.gate_runs import paired_command

        return paired_command(
            args.paired, args.a, args.b, args.blocks, args.runs_dir, args.set or [],
            args.out_dir, out=out,
        )  # fmt: skip
    if len(positional) != 1 or not args.baseline:
        raise UsageError(
            "usage: moeperf gate RUN --baseline NAME[@V] | gate --paired SPEC --a A --b B "
            "| gate calibrate [SPEC]"
        )
    from moeperf.reports.baseline_names import parse_ref
    from moeperf.reports.baselines import BaselineStore
    from moeperf.reports.gate_output import gate_command, parse_min_effects

    min_effects = parse_min_effects(args.min_effect or [])
    name, version = parse_ref(args.baseline)
    baseline = BaselineStore(args.baselines_dir).load_run_data(name, version)
    return gate_command(
        positional[0], baseline, args.runs_dir, args.out_dir, args.force, out=out,
        baseline_label=args.baseline, min_effects=min_effects,
    )  # fmt: skip


def report(args: argparse.Namespace, console: Console) -> int:
    from moeperf.reports.report import report_command

    return report_command(
        args.runs, args.runs_dir, args.out, print_fn=plain_lines(console), force=args.force,
        plotlyjs=args.plotlyjs,
    )  # fmt: skip


def compare(args: argparse.Namespace, console: Console) -> int:
    from moeperf.reports.compare import compare_command

    return compare_command(
        args.a, args.b, args.runs_dir, out=plain_lines(console), force=args.force
    )


def add_gate_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    parser = commands.add_parser(
        "gate",
        parents=[common],
        help="judge a run against a baseline (exit 0 pass; 1 regression, missing metric or "
        "too few judged; 2 bad input or runs not comparable)",
    )
    parser.add_argument(
        "target", nargs="*", metavar="RUN", help="the run to judge, or 'calibrate [SPEC]'"
    )
    parser.add_argument("--baseline", metavar="NAME[@V]", help="the baseline to judge against")
    parser.add_argument(
        "--force",
        action="store_true",
        help="gate despite a host-fingerprint, spec or request-settings mismatch (the verdict "
        "lists what was forced)",
    )
    parser.add_argument(
        "--min-effect",
        action="append",
        metavar="KEY=FRACTION",
        help="minimum effect for a metric class or a metric, e.g. latency_p99=0.3 or "
        "ttft_s_p99=0.1 (repeatable; wins over the spec's [gate] min_effects)",
    )
    parser.add_argument("--out-dir", help="where gate.json and gate.txt go (default: the run)")
    parser.add_argument("--paired", metavar="SPEC", help="run --a and --b interleaved in one job")
    parser.add_argument("--a", help="baseline target: URL, 'synthetic' or 'synthetic:k=v,...'")
    parser.add_argument("--b", help="candidate target, same forms as --a")
    parser.add_argument("--blocks", type=int, default=4, help="blocks per target (paired)")
    parser.add_argument("--pairs", type=int, default=6, help="A/A pairs (calibrate)")
    parser.add_argument(
        "--set", action="append", metavar="KEY=VALUE", help="spec overrides for paired/calibrate"
    )
    parser.set_defaults(handler=gate)

    page = commands.add_parser("report", help="one offline HTML page for one or more runs")
    page.add_argument("runs", nargs="+", metavar="RUN", help="run ids, prefixes, dirs or 'latest'")
    _page_flags(
        page, "report.html in the run's directory; for several runs RUNS_DIR/report-A-vs-B.html"
    )
    page.set_defaults(handler=report)

    comparison = commands.add_parser("compare", help="two runs side by side, with CIs")
    comparison.add_argument("a", help="run A (reference)")
    comparison.add_argument("b", help="run B")
    comparison.add_argument(
        "--force",
        action="store_true",
        help="compare runs whose requests differed (sampling, usage options, extra_body, "
        "scrape interval); the differences are listed as forced",
    )
    comparison.set_defaults(handler=compare)


def _page_flags(page: argparse.ArgumentParser, default_path: str) -> None:
    """--out and --force of a command that writes an HTML page."""
    page.add_argument(
        "--out",
        metavar="FILE",
        help=f"the HTML file, replaced if it exists (default: {default_path})",
    )
    page.add_argument("--force", action="store_true", help=FORCE_HELP)
    page.add_argument(
        "--plotlyjs",
        choices=("inline", "directory", "cdn"),
        default="inline",
        help="where the page's plotly.js comes from: inside it (about 5 MB, opens anywhere "
        "offline), plotly.min.js written once beside it (a folder of reports shares one "
        "copy), or cdn.plot.ly (needs the network)",
    )
