"""How fast the ``moeperf`` command starts: wall time of ``moeperf --help`` and ``moeperf runs
list`` (over a runs directory of a few stored runs), and how many modules each command
imports. Each command runs in a fresh interpreter, as a user starts it; the median of
several runs is printed beside the fastest and slowest (bytecode compiled by a first run
that is not counted).

    python benchmarks/cli_startup.py [--repeats 7]      (tox -e bench-cli)
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Prints the number of modules loaded once the command has run (its own exit code kept).
_COUNTING = """
import sys
from moeperf.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print(f"MODULES {len(sys.modules)}", file=sys.stderr)
sys.exit(code)
"""


def _make_runs(root: Path) -> None:
    """Three small stored runs, so that ``runs list`` reads manifests, as it does for a user."""
    from moeperf.collectors.store import RunStore

    store = RunStore(root)
    for i in range(3):
        run = store.create("serving", spec_given={"name": f"r{i}"}, target={"kind": "url"})
        run.complete()


def _time(command: list[str], repeats: int) -> tuple[list[float], int]:
    subprocess.run(command, capture_output=True, check=False)  # compiles the bytecode
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(command, capture_output=True, check=False)
        times.append(time.perf_counter() - start)
    counted = subprocess.run(
        [sys.executable, "-c", _COUNTING, *command[3:]], capture_output=True, text=True
    )
    modules = int(counted.stderr.rsplit("MODULES ", 1)[-1].split()[0])
    return times, modules


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/cli_startup.py")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="moeperf-cli-startup-") as tmp:
        runs = Path(tmp) / "runs"
        _make_runs(runs)
        base = [sys.executable, "-m", "moeperf"]
        commands = {
            "moeperf --help": [*base, "--help"],
            "moeperf runs list": [*base, "--runs-dir", str(runs), "runs", "list"],
        }
        print("| command | median s | min s | max s | modules loaded |")
        print("|---|---:|---:|---:|---:|")
        for name, command in commands.items():
            times, modules = _time(command, args.repeats)
            print(
                f"| {name} | {statistics.median(times):.3f} | {min(times):.3f} | "
                f"{max(times):.3f} | {modules} |"
            )
    print(f"({args.repeats} runs each, fresh interpreters; python {sys.version.split()[0]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
