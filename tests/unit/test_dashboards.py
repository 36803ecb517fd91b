"""Dashboards as code: the committed JSON is what the Python builds, and every query is sound."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from moeperf.collectors.export import metric_names
from moeperf.dashboards import promql
from moeperf.dashboards.__main__ import check, generate, main
from moeperf.dashboards.build import DASHBOARDS, dashboard_json, render, rendered_files
from moeperf.dashboards.queries import (
    iter_panels,
    panel_queries,
    substitute_variables,
    variable_queries,
)
from moeperf.dashboards.variables import DEFAULT_DATASOURCE_UID

# The checkout's files: under tox the package is imported from an installed wheel, whose
# generated/ (inside site-packages) holds no committed JSON.
DASHBOARDS_DIR = Path(__file__).resolve().parents[2] / "dashboards"
COMMITTED_DIR = DASHBOARDS_DIR / "generated"
REGENERATE = "run `python -m moeperf.dashboards generate` and commit dashboards/generated/"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
EXPECTED_VARIABLES = {
    "serving": ["datasource", "suite", "target", "scenario"],
    "training": ["datasource", "suite", "target", "policy"],
}
EXPECTED_UIDS = {"serving": "moeperf-serving", "training": "moeperf-training"}
SELECTOR = re.compile(r"(moeperf_\w+)\{([^}]*)\}")
MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"')


def _sample_names() -> dict[str, metric_names.Metric]:
    """Every name a query may use -> its metric (counters `_total`, histograms `_bucket` ...)."""
    names = {}
    for metric in metric_names.ALL_METRICS:
        if metric.kind == "histogram":
            for suffix in ("_bucket", "_sum", "_count"):
                names[metric.name + suffix] = metric
        else:
            names[metric.sample_name] = metric
    return names


SAMPLES = _sample_names()


@pytest.fixture(scope="module", params=sorted(DASHBOARDS))
def board(request) -> tuple[str, dict]:
    return request.param, dashboard_json(DASHBOARDS[request.param]())


def test_committed_json_is_what_the_code_generates():
    for name, expected in rendered_files().items():
        path = COMMITTED_DIR / name
        assert path.exists(), f"{path} is missing: {REGENERATE}"
        if path.read_text(encoding="utf-8") != expected:
            pytest.fail(f"{path} differs from what dashboards/ builds: {REGENERATE}")


def test_rendering_is_stable_sorted_and_ends_with_a_newline():
    for build in DASHBOARDS.values():
        text = render(build())
        assert text == render(build())
        assert text.endswith("}\n") and not text.endswith("\n\n")
        assert text == json.dumps(json.loads(text), sort_keys=True, indent=2) + "\n"


def test_check_passes_on_the_committed_json_and_reports_a_hand_edit(tmp_path, capsys):
    assert check(COMMITTED_DIR) == []
    assert main(["check", "--dir", str(COMMITTED_DIR)]) == 0

    written = generate(tmp_path)
    assert sorted(p.name for p in written) == sorted(rendered_files())
    serving = tmp_path / "serving.json"
    serving.write_text(serving.read_text().replace('"TTFT p50', '"Hand-edited p50'))
    (tmp_path / "training.json").unlink()

    assert main(["check", "--dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "serving.json: differs (-1 +1 lines)" in err and "Hand-edited" in err
    assert "training.json: missing" in err
    assert "python -m moeperf.dashboards generate" in err


def test_uids_titles_and_template_variables(board):
    name, dash = board
    assert dash["uid"] == EXPECTED_UIDS[name]
    variables = dash["templating"]["list"]
    assert [v["name"] for v in variables] == EXPECTED_VARIABLES[name]

    datasource = variables[0]
    assert datasource["type"] == "datasource" and datasource["query"] == "prometheus"
    assert datasource["current"]["value"] == DEFAULT_DATASOURCE_UID
    for v in variables[1:]:
        assert v["type"] == "query"
        assert v["datasource"] == DATASOURCE
        assert v["multi"] and v["includeAll"] and v["allValue"] == ".*", v["name"]
        assert v["query"].startswith("label_values(") and v["query"].endswith(f", {v['name']})")
    # Chained: each label variable lists values under the ones chosen before it.
    assert 'suite=~"$suite"' in variables[2]["query"]
    assert 'target=~"$target"' in variables[3]["query"]


def test_every_panel_has_a_unit_a_query_and_the_datasource_variable(board):
    _, dash = board
    panels = list(iter_panels(dash))
    assert len(panels) >= 6
    ids = [p["id"] for p in dash["panels"]]
    assert len(set(ids)) == len(ids) and 0 not in ids
    for panel in panels:
        title = panel["title"]
        assert panel["fieldConfig"]["defaults"].get("unit"), f"{title!r} has no unit"
        assert panel["targets"], f"{title!r} has no query"
        assert panel["datasource"] == DATASOURCE, title
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, title
            assert target["expr"].strip(), title


def test_every_rate_and_increase_uses_the_rate_interval(board):
    _, dash = board
    for title, expr in panel_queries(dash):
        windows = re.findall(r"\[([^\]]*)\]", expr)
        assert all(w == "$__rate_interval" for w in windows), (title, expr)
        functions = re.findall(r"\b(?:rate|irate|increase)\(", expr)
        assert len(functions) == len(windows), (title, expr)


def test_every_metric_in_a_query_is_exported_and_filtered_by_the_variables(board):
    name, dash = board
    label_variables = EXPECTED_VARIABLES[name][1:]
    queries = panel_queries(dash) + variable_queries(dash)
    for title, expr in queries:
        used = re.findall(r"\bmoeperf_\w+", expr)
        assert used, (title, expr)
        unknown = [u for u in used if u not in SAMPLES]
        assert not unknown, f"{title!r} uses {unknown}, not in collectors.export.metric_names"

    for title, expr in panel_queries(dash):
        selectors = SELECTOR.findall(expr)
        assert len(selectors) == len(re.findall(r"\bmoeperf_\w+", expr)), (title, expr)
        for sample, matchers in selectors:
            metric = SAMPLES[sample]
            present = {(label, op, value) for label, op, value in MATCHER.findall(matchers)}
            for label in label_variables:
                if label in metric.labels:
                    assert (label, "=~", f"${label}") in present, (title, sample, label)


def test_queries_use_only_bounded_labels_and_defined_variables(board):
    name, dash = board
    defined = set(EXPECTED_VARIABLES[name]) | {"__rate_interval"}
    for title, expr in panel_queries(dash):
        metrics = [SAMPLES[s] for s in re.findall(r"\bmoeperf_\w+", expr)]
        allowed = {"le"}.union(*(m.labels for m in metrics))
        grouped = {
            label.strip()
            for clause in re.findall(r"\bby \(([^)]*)\)", expr)
            for label in clause.split(",")
        }
        matched = {
            label
            for _, matchers in SELECTOR.findall(expr)
            for label, *_ in MATCHER.findall(matchers)
        }
        assert grouped | matched <= allowed, (title, (grouped | matched) - allowed)
        variables = set(re.findall(r"\$\{?(\w+)", expr))
        assert variables <= defined, (title, variables - defined)
    text = json.dumps(dash)
    for forbidden in ("run_id", "request_id", "runid", "request-id"):
        assert forbidden not in text


def test_every_exported_metric_is_on_a_dashboard():
    used = {
        sample
        for build in DASHBOARDS.values()
        for _, expr in panel_queries(dashboard_json(build()))
        for sample in re.findall(r"\bmoeperf_\w+", expr)
    }
    missing = [
        m.name for m in metric_names.ALL_METRICS if not {m.sample_name, m.name + "_bucket"} & used
    ]
    assert not missing, f"exported but on no dashboard (add a panel in dashboards/): {missing}"


def test_dashboard_code_names_metrics_only_through_collectors():
    for path in DASHBOARDS_DIR.glob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"[\"']moeperf_", text), f"{path.name} spells a metric name"


def test_the_serving_dashboard_has_the_panels_the_issue_asks_for():
    dash = dashboard_json(DASHBOARDS["serving"]())
    exprs = "\n".join(e for _, e in panel_queries(dash))
    for needle in (
        "histogram_quantile(0.99, sum by (le, target, scenario) (rate(moeperf_ttft_seconds_bucket{",
        "moeperf_tpot_seconds_bucket",
        "moeperf_itl_seconds_bucket",
        "moeperf_e2e_seconds_bucket",
        "sum by (target, scenario) (rate(moeperf_output_tokens_total{",
        "sum by (target, scenario, status) (rate(moeperf_requests_total{",
        'status!="ok"',
        "moeperf_in_flight_requests{",
        "moeperf_load_level{",
        "rate(moeperf_slo_good_requests_total{",
        "rate(moeperf_target_spec_decode_accepted_tokens_total{",
        "moeperf_target_kv_cache_usage_ratio{",
        "rate(moeperf_target_prefix_cache_hits_total{",
        "sum by (layer, expert) (rate(moeperf_target_expert_tokens_total{",
        "moeperf_client_loop_lag_seconds{",
        "moeperf_client_cpu_ratio{",
        "moeperf_client_bottleneck_levels_total{",
        "moeperf_last_success_timestamp_seconds{",
    ):
        assert needle in exprs, needle
    types = {p["title"]: p["type"] for p in iter_panels(dash)}
    assert "heatmap" in types.values()
    rows = [p["title"] for p in dash["panels"] if p["type"] == "row"]
    assert "Harness health" in rows


def test_the_training_dashboard_has_the_panels_the_issue_asks_for():
    dash = dashboard_json(DASHBOARDS["training"]())
    exprs = "\n".join(e for _, e in panel_queries(dash))
    for needle in (
        "moeperf_train_mfu_ratio{",
        "rate(moeperf_train_tokens_total{",
        "histogram_quantile(0.5, sum by (le, target, policy) "
        "(rate(moeperf_train_step_seconds_bucket{",
        "moeperf_train_peak_memory_bytes{",
        "increase(moeperf_train_oom_events_total{",
        "increase(moeperf_train_restarts_total{",
        "moeperf_train_expert_load_imbalance_ratio{",
    ):
        assert needle in exprs, needle
    units = {p["title"]: p["fieldConfig"]["defaults"]["unit"] for p in iter_panels(dash)}
    assert units["MFU"] == "percentunit" and units["Peak memory"] == "bytes"


def test_panel_queries_walks_collapsed_rows_and_skips_non_prometheus_targets():
    dash = {
        "panels": [
            {"type": "timeseries", "title": "a", "targets": [{"expr": "up"}, {"expr": "1"}]},
            {
                "type": "row",
                "title": "r",
                "collapsed": True,
                "panels": [{"type": "stat", "title": "b", "targets": [{"expr": "x"}]}],
            },
            {"type": "text", "title": "c"},
            {"type": "timeseries", "title": "d", "targets": [{"refId": "A"}]},
        ]
    }
    assert panel_queries(dash) == [("a", "up"), ("a", "1"), ("b", "x")]


def test_substitute_variables():
    values = {"suite": "default", "target": "a|b", "scenario": ".*", "datasource": "prom"}
    expr = (
        'rate(x{suite=~"$suite", target=~"${target}", scenario=~"${scenario:regex}"}'
        "[$__rate_interval])"
    )
    assert (
        substitute_variables(expr, values)
        == 'rate(x{suite=~"default", target=~"a|b", scenario=~".*"}[1m])'
    )
    assert substitute_variables("[$__rate_interval]", {"__rate_interval": "30s"}) == "[30s]"
    assert substitute_variables("${datasource}", values) == "prom"
    assert substitute_variables("no variables {le}", {}) == "no variables {le}"
    with pytest.raises(KeyError, match=r"\$policy"):
        substitute_variables('x{policy=~"$policy"}', values)
    with pytest.raises(KeyError, match="suite_id"):  # a longer name is not `$suite` + "_id"
        substitute_variables("$suite_id", values)


def test_every_query_is_complete_after_substitution(board):
    name, dash = board
    values = {v: ".*" for v in EXPECTED_VARIABLES[name]}
    for title, expr in panel_queries(dash) + variable_queries(dash):
        out = substitute_variables(expr, values)
        assert "$" not in out, (title, out)
        assert out.count("(") == out.count(")") and out.count("{") == out.count("}"), title


def test_promql_helpers_refuse_the_wrong_metric_kind_or_label():
    with pytest.raises(ValueError, match="gauge"):
        promql.rate(metric_names.IN_FLIGHT, ("target",))
    with pytest.raises(ValueError, match="counter"):
        promql.quantile(0.5, metric_names.REQUESTS, ("target",))
    with pytest.raises(ValueError, match="run_id"):
        promql.rate(metric_names.REQUESTS, ("run_id",))
    assert promql.selector(metric_names.LOOP_LAG) == (
        'moeperf_client_loop_lag_seconds{suite=~"$suite", target=~"$target"}'
    )


# --- provisioning and the dev stack ------------------------------------------------------


@pytest.fixture(scope="module")
def yaml():
    return pytest.importorskip("yaml")


def _load(yaml, relative: str) -> dict:
    return yaml.safe_load((DASHBOARDS_DIR / relative).read_text(encoding="utf-8"))


def test_provisioning_matches_the_dashboards_and_the_compose_stack(yaml):
    datasources = _load(yaml, "provisioning/datasource.yaml")
    assert datasources["apiVersion"] == 1
    (prometheus,) = datasources["datasources"]
    assert prometheus["type"] == "prometheus"
    assert prometheus["uid"] == DEFAULT_DATASOURCE_UID
    # Prometheus and Grafana share the host network in the dev stack (compose.yaml).
    assert prometheus["url"] == "http://127.0.0.1:9090"

    providers = _load(yaml, "provisioning/dashboards.yaml")
    (provider,) = providers["providers"]
    assert provider["type"] == "file"

    compose = _load(yaml, "devstack/compose.yaml")
    services = compose["services"]
    assert {"prometheus", "pushgateway", "grafana"} <= set(services)
    for name, service in services.items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), (name, port)
    # Services on the host network must bind loopback themselves.
    assert "--web.listen-address=127.0.0.1:9090" in services["prometheus"]["command"]
    assert services["grafana"]["environment"]["GF_SERVER_HTTP_ADDR"] == "127.0.0.1"
    devstack = DASHBOARDS_DIR / "devstack"
    mounts = {}
    for service in services.values():
        for volume in service.get("volumes", []):
            source, target, *mode = volume.split(":")
            if source.startswith("."):
                assert (devstack / source).resolve().exists(), source
                mounts[(devstack / source).resolve()] = (target, mode)
    assert mounts[COMMITTED_DIR.resolve()] == (provider["options"]["path"], ["ro"])
    for relative in ("provisioning/datasource.yaml", "provisioning/dashboards.yaml"):
        assert (DASHBOARDS_DIR / relative).resolve() in mounts, relative

    scrape = _load(yaml, "devstack/prometheus.yml")
    jobs = {job["job_name"]: job for job in scrape["scrape_configs"]}
    assert jobs["pushgateway"]["honor_labels"] is True
    assert jobs["pushgateway"]["static_configs"][0]["targets"] == ["127.0.0.1:9091"]
    live = [t for job in jobs.values() for c in job["static_configs"] for t in c["targets"]]
    assert "127.0.0.1:9464" in live
    assert scrape["global"]["scrape_interval"] == prometheus["jsonData"]["timeInterval"]
