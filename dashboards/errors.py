"""The dashboards package's one error root."""


class DashboardsError(Exception):
    """Anything in dashboards that fails in a way the user can act on."""


class PublishError(DashboardsError):
    """Grafana refused or could not be reached. The message never contains a credential."""


class UsageError(DashboardsError):
    """The user's input is wrong (a malformed URL, a missing extra): exit code 2."""
