"""Where a report's answer lies on its page, as headless Chromium lays it out at 1400x900
(a laptop's first screen), with a screenshot of that screen kept as a test artefact.

Issue 40: each suite kind's page must answer its question on the first screen (the curve,
the capacity, the A/B's verdicts, the accuracy verdict, the drill's recovery, the soak's
verdicts, the simulator's answer). The page marks what answers (``reports.render``:
``div.answer``); this measures where its first block ends. Screenshots go to
test-artefacts/first-screens/ (or $MOEPERF_TEST_ARTEFACTS/first-screens/), one per kind,
for a person to look at."""

from __future__ import annotations

import asyncio
import base64
import os
from dataclasses import dataclass
from pathlib import Path

from browser import browser_page

WIDTH_PX, HEIGHT_PX = 1400, 900
ARTEFACTS = Path(
    os.environ.get("MOEPERF_TEST_ARTEFACTS", Path(__file__).parents[2] / "test-artefacts")
)

MEASURE = """(() => {
  const answer = document.querySelector("div.answer");
  if (!answer) return null;
  const first = answer.querySelector(".block");
  const box = (el) => { const r = el.getBoundingClientRect();
                        return [r.top + window.scrollY, r.bottom + window.scrollY]; };
  return {answer: box(answer), first: box(first), page: document.documentElement.scrollHeight,
          heading: answer.closest("section").querySelector("h2").textContent};
})()"""


@dataclass(frozen=True)
class FirstScreen:
    """The answer's place on the page (px from the top) and the page's height."""

    answer_top_px: float
    first_block_bottom_px: float
    page_height_px: float
    screenshot: Path


def first_screen(page: Path, kind: str, profile: Path) -> FirstScreen:
    """Lay ``page`` out at 1400x900, measure its answer, save the first screen as
    ``<kind>.png``. Fails when the page marks no answer."""

    async def measure() -> FirstScreen:
        async with browser_page(profile) as tab:
            await tab.call("Emulation.setDeviceMetricsOverride", width=WIDTH_PX,
                           height=HEIGHT_PX, deviceScaleFactor=1, mobile=False)  # fmt: skip
            # Measured once the charts are drawn (a chart's height moves what follows it).
            await tab.open(page.resolve().as_uri(), settle_s=0.0)
            await tab.charts_drawn()
            placed = await tab.evaluate(MEASURE)
            assert placed is not None, f"{page}: no div.answer (nothing marked as the answer)"
            shot = await tab.call("Page.captureScreenshot", format="png")
            assert not tab.problems, tab.problems
        path = ARTEFACTS / "first-screens" / f"{kind}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return FirstScreen(placed["answer"][0], placed["first"][1], placed["page"], path)

    return asyncio.run(measure())


def assert_answer_on_first_screen(page: Path, kind: str, profile: Path) -> FirstScreen:
    """The answer's first block lies wholly within the first 900 px of the page."""
    screen = first_screen(page, kind, profile)
    assert screen.first_block_bottom_px <= HEIGHT_PX, (
        f"{kind}: the answer ends {screen.first_block_bottom_px:.0f} px down, below the "
        f"first screen ({HEIGHT_PX} px); screenshot: {screen.screenshot}"
    )
    return screen
