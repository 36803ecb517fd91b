"""`moeperf report --plotlyjs`: where a page's plotly.js comes from (reports/plotlyjs.py).

Issue 40: each page was 5 MB, plotly.js embedded in every one. ``directory`` writes
plotly.min.js once into the folder and the pages there load it; Chromium opens two such
pages from disk and draws every chart with nothing logged. ``cdn`` points at cdn.plot.ly
and its policy allows exactly that host (no browser: it needs the network)."""

from __future__ import annotations

import asyncio
import html
import re

import pytest
from browser import browser_page

from moeperf.cli import main
from moeperf.collectors.store import RunStore

pytestmark = pytest.mark.slow

DRAWN = """(async () => {
  const count = () => [...document.querySelectorAll(".plotly-graph-div")]
    .filter((div) => div.querySelector(".main-svg")).length;
  const divs = document.querySelectorAll(".plotly-graph-div").length;
  for (let i = 0; i < 150 && count() < divs; i++) {
    await new Promise((r) => setTimeout(r, 100));
  }
  return {divs, drawn: count()};
})()"""


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[str]]:
    """Two real runs of the synthetic target, two short levels each: made once for the
    module (~9 s each), since every test here only reads them and writes its pages
    elsewhere."""
    runs = tmp_path_factory.mktemp("plotlyjs") / "runs"
    short = ["--set", "load.levels=[1,4]", "--set", "load.duration_s=1.5", "--set",
             "load.warmup_s=0.3", "--set", "export.live_metrics=false",
             # The pages are under test, not the client: beside busy test workers the load
             # worker's loop lags past 2 ms and the run would end invalid (seen at -n 3).
             "--set", "harness.max_loop_lag_p99_s=1.0",
             "--set", "harness.max_cpu_fraction=1.0"]  # fmt: skip
    for _ in range(2):
        assert main(["--runs-dir", str(runs), "run", "synthetic", *short]) == 0
    return str(runs), [m.run_id for m in RunStore(runs).scan()[0]]


def test_directory_pages_share_one_plotly_js_and_draw_every_chart(two_runs, tmp_path, capsys):
    runs, ids = two_runs
    nightly = tmp_path / "nightly"
    for run_id in ids:
        out = nightly / f"{run_id}.html"
        argv = ["--runs-dir", runs, "report", run_id, "--out", str(out), "--plotlyjs",
                "directory"]  # fmt: skip
        assert main(argv) == 0
    printed = capsys.readouterr().out
    assert f"(and {nightly / 'plotly.min.js'})" in printed
    assert sorted(p.name for p in nightly.iterdir()) == sorted(
        [f"{ids[0]}.html", f"{ids[1]}.html", "plotly.min.js"]
    )
    inline = tmp_path / "inline.html"
    assert main(["--runs-dir", runs, "report", ids[0], "--out", str(inline)]) == 0
    page = nightly / f"{ids[0]}.html"
    # The page loads the shared file; inline it was ~5 MB, now a small fraction of that.
    assert '<script charset="utf-8" src="plotly.min.js"></script>' in page.read_text()
    assert page.stat().st_size < inline.stat().st_size / 5, (
        page.stat().st_size, inline.stat().st_size,
    )  # fmt: skip

    async def open_both() -> list[dict]:
        async with browser_page(tmp_path / "profile") as tab:
            found = []
            for run_id in ids:
                # No fixed wait: DRAWN polls until every chart is drawn (up to 15 s).
                await tab.open((nightly / f"{run_id}.html").as_uri(), settle_s=0.0)
                found.append(await tab.evaluate(DRAWN))
            assert tab.problems == [], tab.problems
            return found

    charts = page.read_text().count('class="plotly-graph-div"')
    assert charts >= 3
    for drawn in asyncio.run(open_both()):
        assert drawn == {"divs": charts, "drawn": charts}, drawn


def test_a_cdn_page_loads_plotly_from_the_cdn_and_its_policy_allows_only_that(two_runs, tmp_path):
    runs, ids = two_runs
    out = tmp_path / "cdn.html"
    assert main(["--runs-dir", runs, "report", ids[0], "--out", str(out), "--plotlyjs", "cdn"]) == 0
    page = out.read_text()
    assert re.search(
        r'<script charset="utf-8" src="https://cdn\.plot\.ly/plotly-[\d.]+\.min\.js"', page
    )
    found = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page)
    assert found is not None
    policy = html.unescape(found.group(1))
    assert "script-src 'unsafe-inline' https://cdn.plot.ly" in policy
    assert "default-src 'none'" in policy
    assert not (tmp_path / "plotly.min.js").exists()
    assert "its charts need the network" in page


def test_a_baseline_report_takes_the_same_flag(two_runs, tmp_path):
    runs, ids = two_runs
    baselines = tmp_path / "baselines"
    assert main(["--runs-dir", runs, "baseline", "promote", ids[0], "--name", "nightly",
                 "--baselines-dir", str(baselines)]) == 0  # fmt: skip
    out = tmp_path / "pages" / "nightly.html"
    argv = ["--runs-dir", runs, "baseline", "report", "nightly", "--baselines-dir",
            str(baselines), "--out", str(out), "--plotlyjs", "directory"]  # fmt: skip
    assert main(argv) == 0
    assert '<script charset="utf-8" src="plotly.min.js"></script>' in out.read_text()
    assert (out.parent / "plotly.min.js").is_file()
    assert "works offline with plotly.min.js beside it" in out.read_text()
