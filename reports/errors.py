"""The error root of the reports package.

A ``ReportUsageError`` is the user's to fix (a bad run id, a baseline name that does not
exist, a file of an unknown schema version): the CLI reports it with exit code 2.
"""

from moeperf.collectors.errors import MoeperfError, MoeperfUsageError


class ReportError(MoeperfError):
    """Base class for errors raised by moeperf's reports, baselines and gate."""


class ReportUsageError(ReportError, MoeperfUsageError):
    """Bad input: reported without a traceback, exit code 2."""


class BaselineCorruptError(ReportError, MoeperfUsageError):
    """A baseline's files do not match their recorded content hash: like an unreadable
    input file, the user's to restore (exit code 2)."""


class SpecMismatchError(ReportUsageError):
    """The candidate and the baseline ran different specs (reports.comparability): not
    comparable, the user's to fix (exit code 2) or to override with --force."""
