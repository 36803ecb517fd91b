"""The error root of the collectors package."""


class CollectorError(Exception):
    """Base class for errors raised by moeperf's collectors."""


class SchemaVersionError(CollectorError):
    """A file was written with a schema version this moeperf cannot read."""


class RunNotFoundError(CollectorError):
    """No run directory matches the id or prefix given."""
