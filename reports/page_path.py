"""Where an HTML page is written, and whether a file already there may be replaced.

The rule (docs/guides/reports-and-baselines.md), the same for ``report`` and ``baseline report``:

- without ``--out`` a page goes under the runs directory: one run's report into that run's
  directory (``report.html``), a report of several runs into the runs directory under a
  name of its own (``report-A-vs-B.html``), a baseline's page into the runs directory
  (``baseline-NAME-vN-report.html``);
- a file already at that default path is never replaced unless ``--force`` is given: the
  command exits 2 naming the file and the flag, before the page is built;
- ``--out FILE`` names the file to write, and naming it is the permission to replace it:
  a CI job that writes the same ``--out`` every night keeps working on every re-run.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from moeperf.reports.errors import ReportUsageError

# Run ids are ~40 characters; past this many runs the name says how many and hashes the
# ids, so it stays far below the 255-byte file-name limit of common file systems.
MAX_NAMED_RUNS = 3


@dataclass(frozen=True)
class PagePath:
    """A page's file and whether an existing file there may be replaced."""

    path: Path
    replace: bool


def choose_page_path(default: Path, out: str | None, force: bool) -> PagePath:
    """``--out`` when given (permission to replace it), else ``default`` (replaced only
    with ``--force``). Refuses, with exit 2, a default path that already holds a file."""
    chosen = PagePath(Path(out), replace=True) if out else PagePath(default, replace=force)
    refuse_existing(chosen)
    return chosen


def refuse_existing(page: PagePath) -> None:
    """Raise ``ReportUsageError`` (exit 2) if ``page`` may not replace the file there."""
    if not page.replace and page.path.exists():
        raise ReportUsageError(existing_message(page.path))


def existing_message(path: Path) -> str:
    return (
        f"{path} already exists and is not replaced: pass --force to replace it, "
        "or --out FILE to write the page elsewhere"
    )


def several_runs_name(run_ids: list[str]) -> str:
    """The file name of a report of several runs: ``report-A-vs-B.html``; past
    ``MAX_NAMED_RUNS`` runs, ``report-A-and-N-more-<hash>.html``."""
    if len(run_ids) <= MAX_NAMED_RUNS:
        return "report-" + "-vs-".join(run_ids) + ".html"
    digest = hashlib.sha256("\n".join(run_ids).encode()).hexdigest()[:8]
    return f"report-{run_ids[0]}-and-{len(run_ids) - 1}-more-{digest}.html"


def baseline_page_name(name: str, version: int) -> str:
    """The file name of a baseline's page: one per version, so promoting a new version
    gives a new page instead of a refusal."""
    return f"baseline-{name}-v{version}-report.html"
