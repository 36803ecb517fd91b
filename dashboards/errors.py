"""The dashboards package's one error root."""

from moeperf.collectors.errors import MoeperfError, MoeperfUsageError


class DashboardsError(MoeperfError):
    """Anything in dashboards that fails in a way the user can act on."""


class PublishError(DashboardsError):
    """Grafana refused or could not be reached (exit code 1). The message never contains a
    credential."""


class DashboardsUsageError(DashboardsError, MoeperfUsageError):
    """The user's input is wrong (a malformed URL, a missing extra): exit code 2."""
