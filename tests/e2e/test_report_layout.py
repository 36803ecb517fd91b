"""A report's tables, laid out by headless Chromium at 1400 px: no figure and no word is
broken across lines.

Issue 40's trial found "43 / 7" and "referen / ce" split in narrow columns: every cell
could break anywhere. Now figures (numbers, and figures written as text such as "43 / 7"
or "0.91 [0.87, 0.98]") never wrap, words break only between words, and a table wider
than the page scrolls in its own box. Chromium measures each figure's and each word's
text: its client rectangles must lie on one line."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pandas as pd
import pytest
from browser import browser_page
from first_screen import assert_answer_on_first_screen

from moeperf.cli import main
from moeperf.reports.render import Section, Table, render_page

pytestmark = pytest.mark.slow

# A real run of the synthetic target, two short levels (a few seconds); the harness's own
# limits relaxed (this checks a page's layout, and the tests share the cores).
SHORT = ("--set", "load.levels=[1,4]", "--set", "load.duration_s=1.5", "--set",
         "load.warmup_s=0.3", "--set", "export.live_metrics=false",
         "--set", "harness.max_loop_lag_p99_s=5.0",
         "--set", "harness.max_cpu_fraction=1.0")  # fmt: skip

SPLIT = """(() => {
  const broken = [];
  for (const td of document.querySelectorAll("table.data td")) {
    const node = td.firstChild;
    if (!node || node.nodeType !== Node.TEXT_NODE) continue;
    const text = node.textContent;
    const spans = [];
    if (td.classList.contains("num")) spans.push([0, text.length]);
    else for (const m of text.matchAll(/\\S+/g)) spans.push([m.index, m.index + m[0].length]);
    for (const [a, b] of spans) {
      const range = document.createRange();
      range.setStart(node, a);
      range.setEnd(node, b);
      const lines = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
      if (lines.size > 1) broken.push(text.slice(a, b));
    }
  }
  return {broken, cells: document.querySelectorAll("table.data td").length};
})()"""


def laid_out(page: str, tmp_path) -> dict:
    path = tmp_path / "report.html"
    path.write_text(page, encoding="utf-8")

    async def measure() -> dict:
        async with browser_page(tmp_path / "profile") as tab:
            await tab.call("Emulation.setDeviceMetricsOverride", width=1400, height=900,
                           deviceScaleFactor=1, mobile=False)  # fmt: skip
            await tab.open(path.as_uri(), settle_s=0.0)
            await tab.charts_drawn()
            result: dict = await tab.evaluate(SPLIT)
            assert tab.problems == [], tab.problems
            return result

    return asyncio.run(measure())


def test_a_wide_table_breaks_no_figure_and_no_word(tmp_path):
    # Sixteen columns of figures and words, as an A/B or drill table has: too wide for
    # the page, so before this change each cell was squeezed and split anywhere.
    frame = pd.DataFrame(
        {f"column {i}": ["43 / 7", "0.91 [0.87, 0.98]", "reference", 16384.0] for i in range(16)}
    )
    page = render_page("wide", [Section("wide", "wide", blocks=[Table(frame)])], "")
    measured = laid_out(page, tmp_path)
    assert measured["cells"] == 64
    assert measured["broken"] == []


@pytest.fixture(scope="module")
def reported_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real run with its report written (``--report``), made once for the module: both
    tests below only read it (a run is ~9 s of the file's time)."""
    runs = tmp_path_factory.mktemp("layout") / "runs"
    assert main(["--runs-dir", str(runs), "run", "synthetic", *SHORT, "--report"]) == 0
    return runs


def test_a_runs_report_breaks_no_figure_and_no_word(reported_run, tmp_path):
    # The page --report wrote (build_report of the run, as a user gets it).
    page = next(reported_run.glob("*/report.html")).read_text(encoding="utf-8")
    measured = laid_out(page, tmp_path)
    assert measured["cells"] > 0
    assert measured["broken"] == []


def test_a_curve_runs_page_shows_its_curve_on_the_first_screen(reported_run, tmp_path):
    page = next(reported_run.glob("*/report.html"))
    screen = assert_answer_on_first_screen(page, "curve", tmp_path / "chromium")
    # The curve comes before the run's conditions.
    html = page.read_text(encoding="utf-8")
    assert html.index('class="answer"') < html.index('class="conditions"')
    assert screen.answer_top_px < 400
