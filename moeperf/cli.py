"""The ``moeperf`` command line."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Console

# Only what every command needs is imported here: each command imports its own modules
# when it runs, so `moeperf --help` and `moeperf runs list` start fast (benchmarks/cli_startup.py).
from moeperf import report_commands, target_commands
from moeperf.calibrate_command import add_calibrate_command
from moeperf.collectors.errors import MoeperfError, RunInterrupted
from moeperf.exits import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, exit_code
from moeperf.plan_command import add_plan_commands
from moeperf.probe_command import add_probe_command
from moeperf.suites.errors import UsageError

if TYPE_CHECKING:
    from moeperf.collectors.store import RunStore

PUSHGATEWAY_ENV = "MOEPERF_PUSHGATEWAY_URL"

DESCRIPTION = """\
Benchmark OpenAI-compatible streaming servers (vLLM, SGLang, or moeperf's embedded MoE
reference target) and MoE training: TTFT, TPOT, ITL, throughput and goodput from raw
per-chunk timestamps, stored as one directory of records per run, with offline HTML
reports, versioned baselines and a statistical regression gate."""
EPILOG = """\
examples:
  moeperf run default                      the default benchmark on the embedded target
  moeperf run default --set target.kind=url --set target.url=http://127.0.0.1:8000
  moeperf runs list                        stored runs, oldest first
  moeperf report latest                    the HTML report of the newest run
  moeperf gate latest --baseline nightly   exit 0 pass, 1 regression, 2 bad input

exit codes: 0 complete, 1 the run ended invalid or failed, 2 bad input (spec, flags,
unknown run), 130 interrupted. `moeperf COMMAND --help` describes each command; the
documentation (docs/, README) has the details."""


def _run(args: argparse.Namespace, console: Console) -> int:
    if args.worker:
        return _locust_worker(args)
    if args.spec is None:
        raise UsageError("moeperf run: give a spec (a file, or a shipped spec's name)")
    from moeperf.suites.spec_overrides import FlagOverride

    overrides = list(args.set or []) + _engine_overrides(args)
    if args.metrics_port is not None:
        overrides.append(
            FlagOverride(
                f"export.metrics_port={args.metrics_port}", f"--metrics-port {args.metrics_port}"
            )
        )
    if args.repeat is not None:
        overrides.append(FlagOverride(f"load.repeats={args.repeat}", f"--repeat {args.repeat}"))
    from moeperf.specs import load_spec, runnable_suite
    from moeperf.suites.plain_lines import plain_lines
    from moeperf.suites.present import ProgressBar, announce_run
    from moeperf.suites.run_options import RunOptions

    loaded = load_spec(args.spec, overrides)
    run = runnable_suite(loaded.suite, loaded.source).run
    assert run is not None  # runnable_suite checked it
    from moeperf.collectors.store import RunStore

    store = RunStore(args.runs_dir)
    # The bars show the load while it runs; kept afterwards only with --verbose.
    bar = ProgressBar(console, keep=args.verbose)
    options = RunOptions(
        on_started=lambda writer: announce_run(writer, console),
        say=plain_lines(console),
        pushgateway_url=_pushgateway_url(args),
        progress=bar,
        warn_only=args.warn_only,
    )
    try:
        run_id = run.load()(loaded.spec, loaded.given, store, options)
    finally:
        bar.close()
    return _show_ended(args, store, run_id, console)


def _engine_overrides(args: argparse.Namespace) -> list[str]:
    """The load-engine flags as the spec fields they set (so the manifest stores them); a
    problem one causes names the flag."""
    from moeperf.suites.spec_overrides import FlagOverride

    overrides: list[str] = []
    if args.engine is not None:
        overrides.append(FlagOverride(f"load.engine={args.engine}", f"--engine {args.engine}"))
    if args.workers is not None:
        overrides.append(FlagOverride(f"load.workers={args.workers}", f"--workers {args.workers}"))
    if args.ui:
        overrides.append(FlagOverride("locust.ui=true", "--ui"))
    if args.master:
        if not args.expect_workers:
            raise UsageError("--master needs --expect-workers N (the remote workers to wait for)")
        overrides.append(
            FlagOverride(
                f"locust.remote_workers={args.expect_workers}",
                f"--expect-workers {args.expect_workers}",
            )
        )
    elif args.expect_workers is not None:
        raise UsageError("--expect-workers is for --master")
    if args.master_bind is not None:
        overrides.append(
            FlagOverride(f"locust.bind={args.master_bind}", f"--master-bind {args.master_bind}")
        )
    if args.master_port is not None:
        overrides.append(
            FlagOverride(f"locust.port={args.master_port}", f"--master-port {args.master_port}")
        )
    if args.master_host is not None:
        raise UsageError("--master-host is for --worker")
    return overrides


def _locust_worker(args: argparse.Namespace) -> int:
    """``moeperf run --worker --master-host H``: a Locust worker, until its master ends."""
    if args.spec is not None or args.set:
        raise UsageError("--worker takes no spec: the master sends the run to its workers")
    if not args.master_host:
        raise UsageError("--worker needs --master-host (the address of the run's master)")
    import subprocess

    command = [sys.executable, "-m", "moeperf.suites.serving.locust_engine.worker"]
    command += ["--master-host", args.master_host, "--master-port", str(args.master_port or 5557)]
    return subprocess.call(command)


def _pushgateway_url(args: argparse.Namespace) -> str | None:
    """--pushgateway, else $MOEPERF_PUSHGATEWAY_URL; never stored in the run."""
    return args.pushgateway or os.environ.get(PUSHGATEWAY_ENV) or None


# The statuses --warn-only lets exit 0: the run ran to its end, some levels were not ok.
WARN_ONLY_STATUSES = ("failed", "invalid")


def _show_ended(args: argparse.Namespace, store: RunStore, run_id: str, console: Console) -> int:
    """Show a run that just ended (its report written first with --report); its exit
    code: 0 complete, 1 failed, invalid or aborted (0 for failed or invalid with
    ``--warn-only``, which says so)."""
    from moeperf.run_view import show_run, write_report

    if args.report:
        write_report(store, run_id, console)
    status = show_run(store, run_id, console, verbose=args.verbose)
    if status == "complete":
        return EXIT_OK
    if args.warn_only and status in WARN_ONLY_STATUSES:
        console.print(
            f"warning: the run ended {status}; exit code 0 because of --warn-only "
            "(only its ok levels are sound)",
            markup=False,
            highlight=False,
        )
        return EXIT_OK
    return EXIT_FAILED


def _runs_list(args: argparse.Namespace, console: Console) -> int:
    from moeperf.collectors.store import RunStore
    from moeperf.reports.terminal.runs_table import runs_table
    from moeperf.run_view import path_text

    store = RunStore(args.runs_dir)
    manifests, problems = store.scan()
    if args.last is not None:
        manifests = manifests[-args.last :] if args.last > 0 else []
    console.print(runs_table(manifests))
    if args.last is not None:
        # The newest runs, what was just run: the path of each one's page, whole (a path
        # in a table's cell would be folded), to open.
        for m in manifests:
            page = store.root / m.run_id / "report.html"
            written = page.exists()
            console.print(f"report: {path_text(page)}" if written else
                          f"report of {m.run_id}: not written (moeperf report {m.run_id})",
                          markup=False, highlight=False)  # fmt: skip
    for problem in problems:
        # Damaged, or written by a newer moeperf: the problem says which, and what to do.
        console.print(
            f"warning: skipped a run that cannot be read: {problem}", markup=False, highlight=False
        )
    return EXIT_OK


def _runs_show(args: argparse.Namespace, console: Console) -> int:
    from moeperf.collectors.store import RunStore
    from moeperf.run_view import show_run

    show_run(RunStore(args.runs_dir), args.run, console, verbose=args.verbose)
    return EXIT_OK


def _ingest_benchmark(args: argparse.Namespace, console: Console) -> int:
    from moeperf.suites.ingest import ingest_command
    from moeperf.suites.plain_lines import plain_lines

    return ingest_command(
        args.json,
        args.runs_dir,
        args.name,
        out=plain_lines(console),
    )


def _dashboards_publish(args: argparse.Namespace, console: Console) -> int:
    # The CLI is the one place that composes packages: it may reach into dashboards.
    from moeperf.dashboards.publish import publish_command

    return publish_command(args.url)


def _verbose_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also print every level's (block's, window's) tables, what each request "
        "asked, and the load's progress bars as they were; without it: the answer, the "
        "status and the paths",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="moeperf",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--runs-dir", default="runs", help="where runs are stored (default: runs)")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run a suite spec")
    run.add_argument(
        "spec",
        nargs="?",
        help="a spec file, or the name of a shipped spec (e.g. default); not with --worker",
    )
    run.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override a spec field, e.g. load.levels=[1,8]",
    )
    run.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve live /metrics on 127.0.0.1:PORT (default: any free port, printed)",
    )
    run.add_argument(
        "--pushgateway",
        metavar="URL",
        help=f"push final metrics to this Pushgateway (default: ${PUSHGATEWAY_ENV}); "
        "never stored in the run",
    )
    run.add_argument(
        "--repeat",
        type=int,
        metavar="N",
        help="run every level N times, interleaved (all levels, then all again), and show "
        "the spread between repeats beside each level's own interval (load.repeats)",
    )
    run.add_argument(
        "--warn-only",
        action="store_true",
        help="exit 0 even when levels failed or were invalid (the run's status and the "
        "levels' statuses still say so; an aborted run still exits 1)",
    )
    _verbose_flag(run)
    run.add_argument(
        "--report",
        action="store_true",
        help="write the run's HTML report (RUN_DIR/report.html) when it ends, whatever "
        "its status; its path ends the output",
    )
    engine = run.add_argument_group(
        "load engine",
        "asyncio (the default, the precise one) or Locust: local worker processes, or "
        "workers on other machines under this run's master (docs/tutorials/locust.md)",
    )
    engine.add_argument("--engine", choices=("asyncio", "locust"), help="load.engine")
    engine.add_argument("--workers", type=int, metavar="N", help="local load worker processes")
    engine.add_argument("--ui", action="store_true", help="Locust's web UI on 127.0.0.1:8089")
    engine.add_argument(
        "--master",
        action="store_true",
        help="also wait for --expect-workers Locust workers from other machines",
    )
    engine.add_argument("--expect-workers", type=int, metavar="N", help="with --master")
    engine.add_argument(
        "--master-bind",
        metavar="HOST",
        help="where the master listens for workers (127.0.0.1; give an address remote "
        "workers can reach)",
    )
    engine.add_argument("--master-port", type=int, metavar="PORT", help="the master's port")
    engine.add_argument(
        "--worker",
        action="store_true",
        help="be a Locust worker of the master at --master-host (no spec: it sends the run)",
    )
    engine.add_argument("--master-host", metavar="HOST", help="with --worker")
    run.set_defaults(handler=_run)

    runs = commands.add_parser("runs", help="list or show stored runs")
    runs_commands = runs.add_subparsers(dest="runs_command", required=True)
    listing = runs_commands.add_parser("list", help="all runs, oldest first, with their reports")
    listing.add_argument(
        "--last",
        type=int,
        metavar="N",
        help="only the newest N runs, then the path of each one's report page",
    )
    listing.set_defaults(handler=_runs_list)
    show = runs_commands.add_parser("show", help="one run's percentiles with sample counts")
    show.add_argument("run", help="run id, unique prefix, directory, or 'latest'")
    _verbose_flag(show)
    show.set_defaults(handler=_runs_show)

    add_calibrate_command(commands)
    ingest = commands.add_parser(
        "ingest-benchmark", help="store a pytest-benchmark JSON file as a run (suite micro)"
    )
    ingest.add_argument("json", help="the file written by pytest --benchmark-json")
    ingest.add_argument("--name", help="the run's name (default: micro)")
    ingest.set_defaults(handler=_ingest_benchmark)

    reports_common = argparse.ArgumentParser(add_help=False)
    reports_common.add_argument(
        "--baselines-dir",
        default="reports/baselines",
        help="where baselines live (default: reports/baselines, committed to the repository)",
    )
    report_commands.add_baseline_commands(commands, reports_common)
    report_commands.add_gate_commands(commands, reports_common)
    target_commands.add_target_commands(commands)
    add_probe_command(commands)
    add_plan_commands(commands)

    dashboards = commands.add_parser("dashboards", help="Grafana dashboards")
    dashboards_commands = dashboards.add_subparsers(dest="dashboards_command", required=True)
    publish = dashboards_commands.add_parser(
        "publish", help="push the dashboards to Grafana (token from $GRAFANA_TOKEN)"
    )
    publish.add_argument(
        "--url", required=True, help="Grafana base URL, e.g. http://127.0.0.1:3000"
    )
    publish.set_defaults(handler=_dashboards_publish)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Tables need room; rich falls back to 80 columns when output is not a terminal.
    # markup=False: every string printed (table cells included) is text. Runs carry the
    # user's and the target's words and package hints ("pip install 'moeperf[gpu]'"),
    # which rich markup would eat; styles are given as Text and style= instead.
    console = Console(width=None if sys.stdout.isatty() else 160, markup=False)
    err = Console(stderr=True, width=None if sys.stderr.isatty() else 160, markup=False)
    try:
        return args.handler(args, console)
    except (KeyboardInterrupt, RunInterrupted) as exc:
        # The run itself is already stored as aborted, with what it measured.
        signal_name = getattr(exc, "signal_name", "SIGINT")
        err.print(f"aborted by {signal_name}; what was measured is kept", markup=False)
        return EXIT_INTERRUPTED
    except MoeperfError as exc:
        # Bad input (spec, flags, run ids, unreadable or corrupt files) exits 2, anything
        # else moeperf raised on purpose 1: both without a traceback.
        err.print(f"error: {exc}", markup=False, highlight=False)
        return exit_code(exc)


if __name__ == "__main__":
    sys.exit(main())
