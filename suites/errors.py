"""The error root of the suites package. A ``UsageError`` is the user's to fix: exit 2."""

from moeperf.collectors.errors import MoeperfError, MoeperfUsageError


class SuiteError(MoeperfError):
    """Base class for errors raised by moeperf's suites."""


class UsageError(SuiteError, MoeperfUsageError):
    """Bad input from the user (spec, flags, paths): reported without a traceback."""


class SpecError(UsageError):
    """A suite spec that cannot be read or does not validate."""


class TargetError(SuiteError):
    """A target moeperf was asked to start could not be started."""
