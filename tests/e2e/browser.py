"""Headless Chromium for the browser tests: finding it, and driving a page over the
DevTools protocol (CDP) when a test must act on the page in real time (type into the docs'
search box and wait for the worker's answer), which --dump-dom's virtual time cannot."""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import shutil
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest


def chromium() -> str:
    """Debian's chromium; missing, the test skips (or fails under CI=true)."""
    path = shutil.which("chromium") or (
        "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None
    )
    if path:
        return path
    message = "Chromium is not installed: apt-get install -y chromium (Debian)"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(message)
    pytest.skip(message)


@dataclass
class Page:
    """One browser tab over CDP: navigate, evaluate, and every problem it logged."""

    ws: aiohttp.ClientWebSocketResponse
    problems: list[str] = field(default_factory=list)
    _ids: itertools.count = field(default_factory=lambda: itertools.count(1))

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        call_id = next(self._ids)
        await self.ws.send_json({"id": call_id, "method": method, "params": params})
        while True:
            message = await self.ws.receive_json()
            if message.get("id") == call_id:
                assert "error" not in message, message
                result: dict[str, Any] = message.get("result", {})
                return result
            self._note(message)

    async def open(self, url: str, settle_s: float = 1.5) -> None:
        """Navigate, wait until the document has loaded (a large page takes seconds to
        parse), then ``settle_s`` more for its scripts (the search worker, Plotly)."""
        await self.call("Page.navigate", url=url)
        for _ in range(300):
            state = await self.evaluate(
                f"location.href === {url!r} && document.readyState === 'complete'"
            )
            if state:
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"{url} did not finish loading in 30 s")
        await asyncio.sleep(settle_s)

    async def charts_drawn(self, timeout_s: float = 15.0, settle_s: float = 0.3) -> bool:
        """Wait until every Plotly chart on the page holds its drawn SVG (at most
        ``timeout_s``), then ``settle_s`` more for what follows a draw (a relayout); whether
        they were all drawn. A fixed wait of 2 s before was too long on an idle host and
        could be too short on a busy one."""
        drawn = """[...document.querySelectorAll(".plotly-graph-div")]
          .every((div) => div.querySelector(".main-svg") !== null)"""
        for _ in range(round(timeout_s / 0.1)):
            if await self.evaluate(drawn):
                await asyncio.sleep(settle_s)
                return True
            await asyncio.sleep(0.1)
        return False

    async def evaluate(self, expression: str) -> Any:
        """The value of ``expression`` (a promise is awaited)."""
        result = await self.call(
            "Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True
        )
        assert "exceptionDetails" not in result, result
        return result["result"].get("value")

    def _note(self, message: dict[str, Any]) -> None:
        method, params = message.get("method"), message.get("params", {})
        if method == "Runtime.exceptionThrown":
            self.problems.append("exception: " + str(params["exceptionDetails"]))
        elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            self.problems.append("console.error: " + str(params.get("args")))
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            entry = params["entry"]
            self.problems.append(f"log: {entry.get('text')} {entry.get('url', '')}")


@asynccontextmanager
async def browser_page(profile: Path) -> AsyncIterator[Page]:
    """A headless Chromium with one tab, driven over CDP on 127.0.0.1."""
    process = subprocess.Popen(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
         f"--user-data-dir={profile}", "about:blank"],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stderr is not None
        port = None
        for line in process.stderr:
            if found := re.search(r"DevTools listening on ws://127\.0\.0\.1:(\d+)/", line):
                port = found.group(1)
                break
        assert port, "Chromium did not start its DevTools endpoint"
        async with aiohttp.ClientSession() as session:
            targets = await (await session.get(f"http://127.0.0.1:{port}/json/list")).json()
            tab = next(t for t in targets if t["type"] == "page")
            async with session.ws_connect(tab["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                page = Page(ws)
                for domain in ("Runtime", "Log", "Page"):
                    await page.call(f"{domain}.enable")
                yield page
    finally:
        process.terminate()
        process.wait(timeout=10)
