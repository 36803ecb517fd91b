"""The Prometheus / Pushgateway / promtool helpers against the real binaries, no mocks.

Each scrape test waits ~5-6 s: Prometheus batches target-discovery updates every 5 s, so a new
target (at startup or after a reload) is scraped only after that.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    push_to_gateway,
    start_http_server,
)
from prometheus_stack import (
    PrometheusQueryError,
    PrometheusServer,
    PushgatewayServer,
    StartupError,
    find_binary,
    require_binary,
)

pytestmark = pytest.mark.slow


@pytest.fixture
def exporter() -> Iterator[tuple[str, CollectorRegistry]]:
    """A prometheus_client exposition on 127.0.0.1:<ephemeral>, with a counter and a histogram."""
    registry = CollectorRegistry()
    requests = Counter("moeperf_test_requests", "Requests served.", ["model"], registry=registry)
    latency = Histogram(
        "moeperf_test_latency_seconds",
        "Request latency.",
        buckets=(0.1, 0.5, 1.0),
        registry=registry,
    )
    requests.labels(model="tiny-moe").inc(7)
    for seconds in (0.05, 0.2, 0.3, 0.7):
        latency.observe(seconds)
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        yield f"127.0.0.1:{server.server_port}", registry
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_scrapes_a_target_added_after_start(
    prometheus: PrometheusServer, exporter: tuple[str, CollectorRegistry]
) -> None:
    address, _ = exporter
    assert prometheus.url.startswith("http://127.0.0.1:")
    assert prometheus.targets_up() == {}

    prometheus.set_targets({"moeperf": [address]})
    assert prometheus.wait_for_targets(timeout_s=15) == {"moeperf": [address]}

    [sample] = prometheus.wait_for('moeperf_test_requests_total{model="tiny-moe"}', timeout_s=15)
    assert sample["metric"]["job"] == "moeperf"
    assert sample["metric"]["instance"] == address
    assert float(sample["value"][1]) == 7.0

    assert prometheus.query_value("moeperf_test_latency_seconds_count") == 4.0
    assert prometheus.query_value("moeperf_test_latency_seconds_sum") == pytest.approx(1.25)
    buckets = {
        r["metric"]["le"]: float(r["value"][1])
        for r in prometheus.query("moeperf_test_latency_seconds_bucket")
    }
    assert buckets == {"0.1": 1.0, "0.5": 3.0, "1.0": 4.0, "+Inf": 4.0}
    assert prometheus.query_value("up") == 1.0
    [scalar] = prometheus.query("scalar(up) * 2")
    assert scalar["metric"] == {}
    assert scalar["value"][1] == "2"

    # A PromQL error comes back with Prometheus's own message.
    with pytest.raises(PrometheusQueryError, match="parse error"):
        prometheus.query("sum(")
    # A rejected reload says why, and the running config stays.
    with pytest.raises(RuntimeError, match="rejected the new config"):
        prometheus.set_targets({"": [address]})  # an empty job name is invalid
    assert prometheus.jobs == {"moeperf": [address]}
    assert prometheus.query_value("up") == 1.0


def test_pushgateway_metrics_reach_prometheus_with_pushed_labels(
    pushgateway: PushgatewayServer,
    prometheus_factory: Callable[..., PrometheusServer],
) -> None:
    assert pushgateway.url.startswith("http://127.0.0.1:")
    registry = CollectorRegistry()
    Gauge("moeperf_test_run_tokens_per_s", "Throughput.", registry=registry).set(1234.5)
    push_to_gateway(
        pushgateway.address, job="moeperf_bench", registry=registry, grouping_key={"run": "r1"}
    )
    assert "moeperf_test_run_tokens_per_s" in pushgateway.metrics_text()

    prometheus = prometheus_factory({"pushgateway": [pushgateway.address]})
    [sample] = prometheus.wait_for("moeperf_test_run_tokens_per_s", timeout_s=15)
    labels = sample["metric"]
    # honor_labels: the pushed job wins over the scrape job, no exported_job relabelling.
    assert labels["job"] == "moeperf_bench"
    assert labels["run"] == "r1"
    assert "exported_job" not in labels
    assert float(sample["value"][1]) == 1234.5
    assert prometheus.targets_up() == {"pushgateway": [pushgateway.address]}


def test_promtool_accepts_a_prometheus_client_exposition(
    promtool: Callable[[str], tuple[bool, str]], exporter: tuple[str, CollectorRegistry]
) -> None:
    _, registry = exporter
    ok, output = promtool(generate_latest(registry).decode())
    assert ok, output


@pytest.mark.parametrize(
    ("exposition", "complaint"),
    [
        pytest.param(
            "# HELP jobs_done Jobs.\n# TYPE jobs_done counter\njobs_done 3\n",
            'should have "_total" suffix',
            id="counter-without-_total",
        ),
        pytest.param("moeperf-latency 1\n", "parsing error", id="invalid-name"),
    ],
)
def test_promtool_rejects_bad_expositions(
    promtool: Callable[[str], tuple[bool, str]], exposition: str, complaint: str
) -> None:
    ok, output = promtool(exposition)
    assert not ok
    assert complaint in output


def test_startup_failure_reports_the_log(tmp_path) -> None:
    require_binary("prometheus")
    server = PrometheusServer(tmp_path, scrape_interval="not-a-duration")
    with pytest.raises(StartupError, match=r"exited with status \d+[\s\S]*not-a-duration"):
        server.start()
    assert server.pid is None


def test_missing_binary_skips_but_fails_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    name = "moeperf-no-such-binary"
    assert find_binary(name) is None
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="apt-get install"):
        require_binary(name)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="apt-get install"):
        require_binary(name)
