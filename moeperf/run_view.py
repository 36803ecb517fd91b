"""A stored run in the terminal: what ``moeperf run`` prints when a run ends and what
``moeperf runs show`` prints, from the suite's presenter (``reports.terminal.presentation``):
a line naming the run, its notes, the detail with --verbose, the answer, what was not
available, and at the end its status, its directory and its report page."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.text import Text

from moeperf.collectors.errors import MoeperfError
from moeperf.collectors.store import RunStore


def write_report(store: RunStore, run_id: str, console: Console) -> None:
    """``run --report``: the run's page beside it (replacing one written before: the run
    just ended, so a page there is this run's own). A page that cannot be written is
    said, and the run is still shown: what was measured is kept either way."""
    from moeperf.reports.report import report_command

    try:
        report_command([str(store.open(run_id).directory)], str(store.root),
                       print_fn=lambda _: None, force=True)  # fmt: skip
    except MoeperfError as exc:
        _plain(console, f"warning: the report was not written: {exc}")


def _plain(console: Console, line: str) -> None:
    console.print(line, markup=False, highlight=False)


def show_run(store: RunStore, run: str, console: Console, *, verbose: bool = False) -> str:
    """Print a stored run: a line naming it, its notes, then (with ``verbose``) what
    every request asked and each level's detail, then the answer, what was not
    available, and at the end its status and paths. Returns the run's status."""
    from moeperf.registry import find_suite
    from moeperf.reports.request_view import request_facts
    from moeperf.reports.terminal.presentation import Presentation

    reader = store.open(run)
    m = reader.manifest
    target = m.described_target
    # Text, not markup: a note or a reason may hold brackets ("pip install 'moeperf[gpu]'")
    # or the target's own words.
    described = " ".join(v for v in (target.kind, target.url) if v)
    model = f" model={target.model}" if target.model else ""
    console.print(
        Text(m.run_id, style="bold")
        + f"  suite={m.suite}"
        + (f"  target: {described}{model}" if described else model)
    )
    if verbose:
        for label, text in request_facts(m):
            _plain(console, f"{label}: {text}")
    for note in m.notes:
        _plain(console, f"note: {note}")
    summary = reader.summary()
    shown = Presentation(answer=["no summary (the run ended before one was written)"])
    if summary is not None:
        suite = find_suite(m.suite)
        shown = suite.present.load()(summary, reader) if suite is not None else Presentation()
    for line in [*(shown.detail if verbose else ()), *shown.answer]:
        if isinstance(line, str):
            _plain(console, line)
        else:
            console.print(line)
    for line in shown.unavailable:
        _plain(console, line)
    status = Text(f"status: {m.status}", style=_STATUS_STYLES.get(m.status, ""))
    console.print(status + (f" ({m.status_reason})" if m.status_reason else ""))
    _plain(console, f"run: {path_text(reader.directory)}")
    page = reader.directory / "report.html"
    report = path_text(page) if page.exists() else f"not written (moeperf report {m.run_id})"
    _plain(console, f"report: {report}")
    return m.status


# The run's status line at the end of its output.
_STATUS_STYLES = {"complete": "bold green", "invalid": "bold yellow", "failed": "bold red",
                  "aborted": "bold red"}  # fmt: skip


def path_text(path: Path) -> str:
    """``path`` relative to the working directory where it lies under it (shorter, and
    what the user would type), else absolute."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path.resolve())
