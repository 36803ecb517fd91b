"""One error root: every package's errors are MoeperfErrors, the user's mistakes usage errors."""

from __future__ import annotations

import pytest

from moeperf.collectors.errors import (
    CollectorError,
    MoeperfError,
    MoeperfUsageError,
    RunNotFoundError,
    SchemaVersionError,
)
from moeperf.collectors.sources.target_metrics import ExpositionError
from moeperf.dashboards.errors import DashboardsError, DashboardsUsageError, PublishError
from moeperf.exits import EXIT_FAILED, EXIT_USAGE, exit_code
from moeperf.reports.errors import BaselineCorruptError, ReportError, ReportUsageError
from moeperf.suites.errors import SpecError, SuiteError, TargetError, UsageError
from moeperf.suites.serving.load.pool import WorkerFailed
from moeperf.suites.serving.workload.sources import WorkloadError
from moeperf.suites.serving.workload.tokenizer import TokenizerError

USAGE = [
    SchemaVersionError,
    RunNotFoundError,
    UsageError,
    SpecError,
    WorkloadError,
    ReportUsageError,
    BaselineCorruptError,
    DashboardsUsageError,
]
FAILED = [
    CollectorError,
    ExpositionError,
    SuiteError,
    TargetError,
    TokenizerError,
    WorkerFailed,
    ReportError,
    DashboardsError,
    PublishError,
]


@pytest.mark.parametrize("error", USAGE, ids=lambda e: e.__name__)
def test_the_users_mistakes_exit_2(error):
    assert issubclass(error, MoeperfUsageError)
    assert exit_code(error("x")) == EXIT_USAGE == 2


@pytest.mark.parametrize("error", FAILED, ids=lambda e: e.__name__)
def test_everything_else_moeperf_raises_exits_1(error):
    assert issubclass(error, MoeperfError) and not issubclass(error, MoeperfUsageError)
    assert exit_code(error("x")) == EXIT_FAILED == 1
