"""Schema versions of every file a run writes, and the check readers apply."""

from collectors.errors import SchemaVersionError

# Bump when a field is removed or changes meaning; adding an optional field does not need it.
SCHEMA_VERSION = 1
SUPPORTED_SCHEMA_VERSIONS = frozenset({1})


def check_schema_version(found: object, where: str) -> None:
    """Refuse data written with a schema version we do not know how to read."""
    if found in SUPPORTED_SCHEMA_VERSIONS:
        return
    supported = ", ".join(str(v) for v in sorted(SUPPORTED_SCHEMA_VERSIONS))
    if isinstance(found, int) and found > max(SUPPORTED_SCHEMA_VERSIONS):
        advice = "it was written by a newer moeperf: upgrade moeperf (pip install -U moeperf)"
    else:
        advice = "it is not a moeperf file or was written by an unreleased version: re-run it"
    raise SchemaVersionError(
        f"{where}: schema_version {found!r} is not supported (this moeperf reads {supported}); "
        f"{advice}"
    )
