"""moeperf's exit codes, and the one mapping from its errors to them.

Commands raise (collectors.errors.MoeperfError and its branches) instead of printing and
returning a code; the entry points (moeperf/cli.py ``main``, the benchmark scripts' mains)
turn what reaches them into a code with ``exit_code``.
"""

from __future__ import annotations

from moeperf.collectors.errors import MoeperfError, MoeperfUsageError

# The command did what was asked: a run ended complete, a gate passed, a page
# or baseline was written.
EXIT_OK = 0
# A run that did not complete, a gate that found a regression or could not vouch for the
# run (FAIL, INCONCLUSIVE), a target or service that failed: not the user's input.
EXIT_FAILED = 1
# The user's to fix: a spec, flag, run id or file, a report page that exists, a target
# that does not answer (MoeperfUsageError). Nothing already measured is lost.
EXIT_USAGE = 2
# 128 + SIGINT, as a shell reports a process ended by Ctrl-C.
EXIT_INTERRUPTED = 130


def exit_code(error: MoeperfError) -> int:
    """The exit code for an error that ended a command."""
    return EXIT_USAGE if isinstance(error, MoeperfUsageError) else EXIT_FAILED
