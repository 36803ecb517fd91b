"""A report of a real short run, opened in headless Chromium: it renders, offline, safely.

The run drives the synthetic target by URL with a hostile spec name, description and
model name; a second section of hand-built records carries one in a scenario name, so it
reaches Plotly's own text rendering too. Chromium (Debian's ``chromium``) loads the page
from a file with networking off, runs it, and dumps the DOM after the scripts ran. The
page's copy under test gets a hook first in <head> that collects errors, console.error
calls and Content-Security-Policy violations into the DOM (new headless Chromium prints no
console lines). Missing Chromium skips the test, or fails it under CI=true.
"""

from __future__ import annotations

import json
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from browser import chromium

from moeperf.cli import main
from moeperf.collectors.simulation_summary import SimulationSummary
from moeperf.collectors.store import RunStore
from moeperf.collectors.tables import SCHEMAS, table_to_frame
from moeperf.reports.report import build_report
from moeperf.reports.runs import RunData, load_run
from moeperf.suites.serving.embedded.process import running_target
from moeperf.suites.serving.runner import run_serving
from moeperf.suites.serving.spec import ServingSpec

pytestmark = pytest.mark.slow

# Payloads that would leave a mark if they ever ran, and the classic ones.
MARK_ATTR = '"><img src=x onerror="document.documentElement.dataset.pwned=1">'
MARK_SCRIPT = "<script>document.documentElement.dataset.pwned=2</script>"
XSS = "<script>alert(1)</script>" + MARK_ATTR + MARK_SCRIPT
MODEL = "model-" + XSS
# Plotly shows unknown tags as text by itself, but renders its own (<b>, <a href>, <br>):
# this one shows whether a name reaches it escaped.
SCENARIO = "c=<b>bold</b>" + XSS

HOOK = """<script>
window.__reportErrors = [];
addEventListener("error", function (e) { __reportErrors.push("error: " + e.message); });
addEventListener("unhandledrejection", function (e) {
  __reportErrors.push("rejection: " + e.reason);
});
addEventListener("securitypolicyviolation", function (e) {
  __reportErrors.push("csp: " + e.violatedDirective + " " + e.blockedURI);
});
// An injected alert() would block headless Chromium: record it instead.
window.alert = function (message) { __reportErrors.push("alert: " + message); };
(function () {
  var original = console.error;
  console.error = function () {
    __reportErrors.push("console.error: " + Array.prototype.join.call(arguments, " "));
    return original.apply(console, arguments);
  };
})();
addEventListener("load", function () {
  setTimeout(function () {
    var out = document.createElement("pre");
    out.id = "report-test-errors";
    out.textContent = JSON.stringify(__reportErrors);
    document.body.appendChild(out);
  }, 500);
});
</script>"""


class Dom(HTMLParser):
    """The dumped DOM: each plot container with whether it holds a main SVG, the text
    outside scripts and styles (and the part of it drawn in SVG), every element's
    attributes."""

    def __init__(self, page: str):
        super().__init__(convert_charrefs=True)
        self.containers: dict[str, bool] = {}
        self.attributes: list[tuple[str, dict]] = []
        self.text: list[str] = []
        self.svg_text: list[str] = []
        self.errors: str | None = None
        self._stack: list[tuple[str, str | None]] = []
        self._skip = 0
        self._in_errors = False
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.attributes.append((tag, attrs))
        classes = (attrs.get("class") or "").split()
        container = attrs.get("id") if "plotly-graph-div" in classes else None
        if container:
            self.containers[container] = False
        if tag == "svg" and "main-svg" in classes:
            for _, owner in self._stack:
                if owner:
                    self.containers[owner] = True
        if tag in ("script", "style"):
            self._skip += 1
        self._in_errors = attrs.get("id") == "report-test-errors"
        if tag not in ("meta", "br", "img", "input", "link", "path", "rect", "line", "image"):
            self._stack.append((tag, container))

    def handle_endtag(self, tag):
        if tag in ("script", "style"):
            self._skip -= 1
        for index in range(len(self._stack) - 1, -1, -1):
            if self._stack[index][0] == tag:
                del self._stack[index:]
                break

    def handle_data(self, data):
        if self._in_errors:
            self.errors = data
            self._in_errors = False
        if not self._skip:
            self.text.append(data)
        if any(tag == "svg" for tag, _ in self._stack):
            self.svg_text.append(data)


def real_run(runs: Path) -> RunData:
    with running_target(
        "moeperf.targets.synthetic", {"model": MODEL, "ttft_s": 0.01, "itl_s": 0.002}
    ) as url:
        spec = ServingSpec.model_validate(
            {
                "name": XSS,
                "description": "description " + XSS,
                "target": {"kind": "url", "url": url, "model": MODEL},
                "workload": {
                    "input_tokens": {"mean": 16},
                    "output_tokens": {"mean": 8},
                    "num_prompts": 8,
                },
                # Two levels: the curve is drawn (one level is a point, no curve).
                # 1 s levels (1.5 s before): 0.7 s measured at ~26 ms a request is ~25
                # records at c=1, enough for every chart and for ok >= 4 below.
                "load": {"levels": [1, 2], "duration_s": 1.0, "warmup_s": 0.2, "cooldown_s": 0.1},
                "export": {"live_metrics": False, "scrape_target": False},
            }
        )
        store = RunStore(runs)
        run_id = run_serving(spec, spec.model_dump(mode="json"), store)
    return load_run(store, run_id)


def hostile_scenarios(real: RunData) -> RunData:
    """The real run's records under hostile scenario names (one per level, so the curve's
    labels carry them too), as a second section."""
    requests = real.requests.copy()
    requests["scenario"] = SCENARIO + " " + requests["scenario"]
    data = json.loads(real.manifest.to_json())
    return RunData(
        manifest=type(real.manifest).from_dict({**data, "run_id": real.run_id + "-renamed"}),
        requests=requests,
        steps=table_to_frame("steps", SCHEMAS["steps"].empty_table()),
        summary=None,
        server_metrics=[],
        samples=table_to_frame("samples", SCHEMAS["samples"].empty_table()),
    )


def test_report_renders_offline_without_errors_and_shows_hostile_strings_as_text(tmp_path):
    browser = chromium()
    run = real_run(tmp_path / "runs")
    assert run.manifest.target["model"] == MODEL
    ok = run.requests["status"] == "ok"
    assert ok.sum() >= 4
    page = build_report([run, hostile_scenarios(run)], title="report " + XSS)
    result, dom = render(browser, page, tmp_path)

    # The hook ran, and nothing went wrong on the page.
    assert dom.errors is not None, "the page's scripts did not finish"
    assert json.loads(dom.errors) == []
    assert "CONSOLE" not in result.stderr, result.stderr[-2000:]

    # Every chart rendered: each plot container holds Plotly's main SVG.
    # Per section at least: curve, table, 4 CDFs, timeline, prefill (+ errors, if any).
    assert len(dom.containers) == page.count('class="plotly-graph-div"') >= 2 * 8
    assert all(dom.containers.values()), [k for k, v in dom.containers.items() if not v]

    # No payload ran, and each shows as the text it is.
    for tag, attrs in dom.attributes:
        assert "data-pwned" not in attrs, (tag, attrs)
        assert tag != "img", attrs
    text = "".join(dom.text)
    assert text.count(XSS) >= 4  # title, spec name, description, in both sections
    assert text.count(MODEL) >= 4  # model fact and the line above every chart
    # Plotly draws the scenario in SVG (legends, table cells) as the literal characters:
    # unescaped, its HTML-like text parser would have made "bold" bold, dropping the tags.
    svg_text = "".join(dom.svg_text)
    assert svg_text.count(SCENARIO) >= 4


def render(browser: str, page: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess, Dom]:
    """``page`` opened in headless Chromium, offline; its DOM after the scripts ran."""
    # The hook goes first in <head>, before the CSP meta and every other script.
    path = tmp_path / "report.html"
    path.write_text(page.replace("<head>", "<head>" + HOOK, 1), encoding="utf-8")

    command = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--enable-logging=stderr",
        "--v=0",
        "--window-size=1280,2000",
        "--virtual-time-budget=10000",
        "--dump-dom",
        path.as_uri(),
    ]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=45)
    except subprocess.TimeoutExpired:
        pytest.fail("Chromium did not finish in 45 s: did an injected dialog open?")
    assert result.returncode == 0, result.stderr[-2000:]
    return result, Dom(result.stdout)


def test_a_simulation_runs_report_renders_every_chart_offline(tmp_path):
    """The simulation suite end to end through the CLI (a few iterations of every job of
    the shipped spec), its records flagged simulated, its report opened in Chromium."""
    browser = chromium()
    runs = tmp_path / "runs"
    assert main(["--runs-dir", str(runs), "run", "training-sim-scale",
                 "--set", "sim.iterations=4"]) == 0  # fmt: skip
    reader = RunStore(runs).open("latest")
    summary = reader.summary()
    assert isinstance(summary, SimulationSummary)
    assert len(summary.scenarios) == 6 * 5 * 2  # jobs x policies x skews
    steps = reader.steps()
    assert len(steps) == 4 * len(summary.scenarios) + 4 * len(summary.reproductions)
    assert steps["simulated"].all()
    assert {r.paper for r in summary.ablation} >= {"1.16x", "1.22x", "1.38x", "1.13-1.14x"}

    page = build_report([load_run(RunStore(runs), "latest")], title="simulation")
    _, dom = render(browser, page, tmp_path)
    assert dom.errors is not None and json.loads(dom.errors) == []
    assert len(dom.containers) == page.count('class="plotly-graph-div"') >= 3
    assert all(dom.containers.values()), [k for k, v in dom.containers.items() if not v]
    text = " ".join(" ".join(dom.text).split())
    assert "OOM rate against scale (simulated)" in " ".join(dom.svg_text)
    assert "paper (seed 000, not ours)" in text
    assert "Every figure is simulated by targets/cluster_sim, none measured." in text
