"""Schema versions of every file a run writes, and the check readers apply."""

from collections.abc import Collection

from moeperf.collectors.errors import SchemaVersionError

# Bump when a field is removed or changes meaning; adding an optional field does not need it.
SCHEMA_VERSION = 1
SUPPORTED_SCHEMA_VERSIONS = frozenset({1})
# summary.json has its own version (collectors.summary_json says what changed in each).
SUMMARY_SCHEMA_VERSION = 2
SUPPORTED_SUMMARY_SCHEMA_VERSIONS = frozenset({1, 2})


def check_schema_version(
    found: object, where: str, supported: Collection[int] = SUPPORTED_SCHEMA_VERSIONS
) -> None:
    """Refuse data written with a schema version we do not know how to read."""
    if found in supported:
        return
    readable = ", ".join(str(v) for v in sorted(supported))
    if isinstance(found, int) and found > max(supported):
        advice = "it was written by a newer moeperf: upgrade moeperf (pip install -U moeperf)"
    else:
        advice = "it is not a moeperf file or was written by an unreleased version: re-run it"
    raise SchemaVersionError(
        f"{where}: schema_version {found!r} is not supported (this moeperf reads {readable}); "
        f"{advice}"
    )
