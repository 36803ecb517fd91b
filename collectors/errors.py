"""moeperf's one error root, and the collectors package's errors.

Every error moeperf raises on purpose derives from ``MoeperfError``; the ones that are the
user's to fix (a bad spec, flag, run id or file) derive from ``MoeperfUsageError`` as well.
The CLI maps the two to exit codes 1 and 2 in one place (moeperf/exits.py). The root lives
here because collectors is the base layer every other package of ours may import.

targets/ imports nothing of ours, so its errors (``SyntheticConfigError``,
``ReferenceConfigError``, ``TrainingConfigError``) are ``ValueError``s of their own; suites
translates them into its ``SpecError`` where it validates a spec (suites/spec.py).
"""


class MoeperfError(Exception):
    """Base class for every error moeperf raises on purpose: reported without a traceback."""


class MoeperfUsageError(MoeperfError):
    """Bad input from the user (spec, flags, run ids, unreadable files): exit code 2."""


class CollectorError(MoeperfError):
    """Base class for errors raised by moeperf's collectors."""


class SchemaVersionError(CollectorError, MoeperfUsageError):
    """A file was written with a schema version this moeperf cannot read."""


class RunNotFoundError(CollectorError, MoeperfUsageError):
    """No run directory matches the id or prefix given."""


class CorruptRunFileError(CollectorError, MoeperfUsageError):
    """A run file that cannot be read (truncated, overwritten, not what its name says):
    the message names the file and what is wrong with it."""


class RunsDirError(CollectorError, MoeperfUsageError):
    """The runs directory given is not one (a file)."""


class RunInterrupted(BaseException):
    """Raised in the main thread when SIGINT or SIGTERM asks a run to stop (a
    BaseException, as KeyboardInterrupt is: no ``except Exception`` swallows it)."""

    def __init__(self, signal_name: str):
        super().__init__(signal_name)
        self.signal_name = signal_name
