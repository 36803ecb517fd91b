"""Whether a run should become a baseline: what ``baseline promote`` refuses without
``--force``. A baseline is what later runs are judged against, so a run that ended
aborted, invalid or failed, has a level that is not ok, or failed the gate is refused."""

from __future__ import annotations

import json

from moeperf.collectors.errors import CollectorError
from moeperf.collectors.serving_records import ServingSummary
from moeperf.collectors.store import RunReader
from moeperf.reports.verdicts import FAILING

# The gate's verdict, written into the candidate run's directory (reports/gate_output.py).
GATE_FILE = "gate.json"


def _stored_gate_problem(reader: RunReader) -> str | None:
    """What a failed gate verdict stored with the run (its gate.json) says; None if passed.

    ``reports.gate_output.write_gate`` writes gate.json into the candidate run's directory;
    its ``exit_code`` is the verdict (1: the gate failed)."""
    path = reader.directory / GATE_FILE
    if not path.is_file():
        return None
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
        exit_code = body["exit_code"]
    except (OSError, ValueError, TypeError, KeyError) as exc:
        return f"its stored gate verdict {path} cannot be read ({type(exc).__name__}: {exc})"
    if exit_code == 0:
        return None
    verdicts = body.get("verdicts")
    failing = [
        f"{v.get('key', '?')} {v['outcome']}"
        for v in (verdicts if isinstance(verdicts, list) else [])
        if isinstance(v, dict) and v.get("outcome") in FAILING
    ]
    details = [str(body["status"])] if body.get("status") else []
    if failing:
        details.append(", ".join(failing[:5]) + (" ..." if len(failing) > 5 else ""))
    if body.get("coverage_problem"):
        details.append(str(body["coverage_problem"]))
    against = body.get("baseline", "a baseline")
    said = "".join(f"; {d}" for d in details)
    return f"it failed the gate against {against} (gate.json: exit {exit_code}{said})"


def promotion_problems(reader: RunReader) -> list[str]:
    """Why a run that has ended should not become a baseline without ``--force``: it ended
    aborted, invalid or failed, a level of it is not ok, or it failed the gate."""
    problems = []
    status = reader.manifest.status
    if status != "complete":
        problems.append(f"it ended {status} ({reader.manifest.status_reason or 'no reason given'})")
    else:
        try:
            summary = reader.summary()
        except (CollectorError, OSError, ValueError):
            summary = None  # reported as unreadable when the files are checked
        if isinstance(summary, ServingSummary):
            problems.extend(
                f"level {name} is {entry.status} ({entry.status_reason})"
                for name, entry in summary.scenarios.items()
                if entry.status != "ok"
            )
    gate_problem = _stored_gate_problem(reader)
    if gate_problem is not None:
        problems.append(gate_problem)
    return problems
