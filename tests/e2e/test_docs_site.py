"""The documentation site, built with --strict and opened in headless Chromium.

The build is the one `tox -e docs` runs (mkdocs.yml, every link and anchor checked). The
site is served from 127.0.0.1 (browsers start no search worker from file://) and read as
a newcomer would: the home page, a tutorial and a generated reference page open with no
error, exception or failed request logged; and the search box, typed into, finds the
metric definitions page with no network but loopback.
"""

from __future__ import annotations

import asyncio
import functools
import http.server
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from browser import browser_page

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
PAGES = ("index.html", "tutorials/own-server.html", "reference/cli.html")

SEARCH = """(async () => {
  const input = document.querySelector("input.md-search__input");
  input.focus();
  input.value = "%s";
  input.dispatchEvent(new Event("input", {bubbles: true}));
  input.dispatchEvent(new KeyboardEvent("keyup", {bubbles: true, key: "T"}));
  for (let i = 0; i < 100; i++) {
    await new Promise((r) => setTimeout(r, 100));
    const links = [...document.querySelectorAll(".md-search-result__item a")];
    if (links.length) return links.map((a) => a.getAttribute("href"));
  }
  return document.querySelector(".md-search-result__meta").textContent.trim();
})()"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    out = tmp_path_factory.mktemp("site")
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(REPO / "mkdocs.yml"),
         "-d", str(out)],
        capture_output=True, text=True, env={"NO_MKDOCS_2_WARNING": "1", "PATH": ""},
    )  # fmt: skip
    assert build.returncode == 0, build.stderr[-3000:]
    handler = functools.partial(QuietHandler, directory=str(out))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def test_pages_open_without_errors_and_search_finds_the_definitions(site, tmp_path):
    async def read() -> tuple[dict[str, str], object, list[str]]:
        async with browser_page(tmp_path / "profile") as page:
            titles = {}
            for path in PAGES:
                await page.open(site + path)
                titles[path] = await page.evaluate("document.querySelector('h1').textContent")
            found = await page.evaluate(SEARCH % "TTFT")
            return titles, found, page.problems

    titles, found, problems = asyncio.run(read())
    assert problems == [], problems
    assert titles["reference/cli.html"].strip().startswith("Command line")
    assert all(t.strip() for t in titles.values()), titles
    # The search worker answered with results (not "Initializing search" or "No matching
    # documents"), the metric definitions among them.
    assert isinstance(found, list) and found, found
    assert any("concepts/metrics.html" in href for href in found), found
