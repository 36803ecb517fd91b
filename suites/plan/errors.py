"""The planner's error: a model or deployment it cannot plan, the user's to fix (exit 2)."""

from moeperf.suites.errors import UsageError


class PlanError(UsageError):
    """A config.json or deployment the planner cannot use; the message names the field."""
