"""The error root of the reports package.

A ``ReportUsageError`` is the user's to fix (a bad run id, a baseline name that does not
exist, a file of an unknown schema version): the CLI reports it with exit code 2.
"""


class ReportError(Exception):
    """Base class for errors raised by moeperf's reports, baselines and gate."""


class ReportUsageError(ReportError):
    """Bad input: reported without a traceback, exit code 2."""


class BaselineCorruptError(ReportError):
    """A baseline's files do not match their recorded content hash."""
