"""Fixtures for the integration tests: a real Prometheus, Pushgateway and promtool.

The classes behind them are in ``prometheus_stack.py`` next to this file (importable as
``prometheus_stack``: pytest's default "prepend" import mode puts this directory, which has no
``__init__.py``, on ``sys.path``). A missing binary skips the test, or fails it under ``CI=true``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

import pytest
from prometheus_stack import (
    PrometheusServer,
    PushgatewayServer,
    promtool_check_metrics,
    require_binary,
)


@pytest.fixture
def pushgateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PushgatewayServer]:
    """A running Pushgateway on 127.0.0.1 (``.url``, ``.address``), in-memory, stopped after."""
    with PushgatewayServer(tmp_path_factory.mktemp("pushgateway")) as server:
        yield server


@pytest.fixture
def prometheus_factory(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[..., PrometheusServer]]:
    """``make(jobs=None, *, scrape_interval="1s", honor_labels=("pushgateway",))``: a running
    Prometheus scraping ``jobs`` ({job: ["host:port", ...]}); every one is stopped after."""
    started: list[PrometheusServer] = []

    def make(jobs: Mapping[str, Sequence[str]] | None = None, **kwargs) -> PrometheusServer:
        server = PrometheusServer(tmp_path_factory.mktemp("prometheus"), jobs, **kwargs)
        started.append(server)
        server.start()
        return server

    try:
        yield make
    finally:
        for server in reversed(started):
            server.stop()


@pytest.fixture
def prometheus(prometheus_factory: Callable[..., PrometheusServer]) -> PrometheusServer:
    """A running Prometheus with no scrape jobs yet: add them with ``set_targets``."""
    return prometheus_factory()


@pytest.fixture
def promtool() -> Callable[[str], tuple[bool, str]]:
    """``check(text) -> (ok, output)``: ``promtool check metrics`` on an exposition."""
    require_binary("promtool")
    return promtool_check_metrics
