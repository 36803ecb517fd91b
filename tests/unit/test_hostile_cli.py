"""Hostile command lines: hypothesis builds argument lists for every command that reads
(runs, reports, comparisons, the gate, baselines, ingestion, the planner, the probe) from
valid flags, wrong values, damaged runs and arbitrary text, and each must end in an exit
code with a message (2 for bad input), never a traceback. Commands that start a
benchmark (run, calibrate, target, gate --paired) are left out: a valid line would run one.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moeperf.cli import main

COMMANDS = [
    ["runs", "list"],
    ["runs", "show"],
    ["report"],
    ["compare"],
    ["gate"],
    ["baseline", "list"],
    ["baseline", "show"],
    ["baseline", "report"],
    ["baseline", "promote"],
    ["ingest-benchmark"],
    ["plan", "memory"],
    ["probe"],
]
FLAGS = [
    "--force", "--out", "--name", "--min-effect", "--baseline", "--a", "--b", "--blocks",
    "--pairs", "--set", "--json", "--api", "--model", "--header", "--api-key-env",
    "--out-dir", "--deploy", "--model-config", "-h",
]  # fmt: skip
VALUES = [
    "latest", "nightly", "nightly@3", "nightly@x", "0", "-1", "1e309", "nan", "",
    "x=y", "ttft_s_p99=2", "=", "a=b=c", "chat", "http://127.0.0.1:9", "not a url",
    "/dev/null", "/nonexistent/dir/file.json", "damaged", "truncated", "..", "/",
]  # fmt: skip
FUZZ = settings(
    max_examples=200, deadline=None, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)  # fmt: skip
TOKENS = st.one_of(st.sampled_from(FLAGS), st.sampled_from(VALUES), st.text(max_size=20))


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """A runs dir holding damaged runs, a baselines dir, and a file that is not JSON."""
    root = tmp_path_factory.mktemp("hostile")
    runs = root / "runs"
    (runs / "damaged").mkdir(parents=True)
    (runs / "damaged" / "manifest.json").write_bytes(b"\xff\x00 not json")
    (runs / "truncated").mkdir()
    (runs / "truncated" / "manifest.json").write_text('{"schema_version": 1, "run_id": "tr')
    (root / "baselines").mkdir()
    (root / "garbage.json").write_bytes(b"{\x00\x01")
    return root


@FUZZ
@given(
    command=st.sampled_from(COMMANDS),
    # Positionals first, most of the time, so that most lines get past argparse to the
    # command itself; then anything.
    first=st.lists(st.sampled_from(VALUES), max_size=2),
    rest=st.lists(TOKENS, max_size=5),
)
def test_any_command_line_ends_in_an_exit_code_and_a_message(store, capsys, command, first, rest):
    tokens = first + rest
    tokens = [str(store / "garbage.json") if t == "/dev/null" else t for t in tokens]
    argv = ["--runs-dir", str(store / "runs"), *command]
    if command[0] in ("gate", "baseline"):
        argv += ["--baselines-dir", str(store / "baselines")]
    code: int | str | None
    try:
        code = main([*argv, *tokens])
    except SystemExit as exc:  # argparse: a usage error (2) or --help (0)
        code = exc.code
    out, err = capsys.readouterr()
    assert "Traceback" not in err + out
    assert code in (0, 1, 2), (argv + tokens, code, err)
    if code == 2:
        assert err.strip(), "exit 2 without a message"
    # Whatever the line, nothing outside the store is written (a report's --out aside).
    shutil.rmtree(store / "runs" / "reports", ignore_errors=True)
