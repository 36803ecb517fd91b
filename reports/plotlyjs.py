"""Where a report's plotly.js comes from: inside the page (the default), a file beside it,
or Plotly's CDN.

``inline`` makes a page of about 5 MB that opens anywhere, offline. ``directory`` writes
plotly.min.js once into the page's folder and every page there loads it (a folder of
nightly reports shares one copy: each page is a few hundred KB). ``cdn`` loads it from
cdn.plot.ly: the smallest page, which needs the network to draw its charts. Each mode's
Content-Security-Policy allows exactly that source of scripts and nothing else.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

PlotlyJs = Literal["inline", "directory", "cdn"]
PLOTLYJS_MODES: tuple[PlotlyJs, ...] = ("inline", "directory", "cdn")
# The name plotly's own "directory" mode gives the file (plotly.io.to_html).
PLOTLY_FILE = "plotly.min.js"

# Inline scripts and styles only; images from data: and blob: (the PNG download button).
_BASE = "default-src 'none'; style-src 'unsafe-inline'; img-src data: blob:; font-src data:"
_SCRIPTS: dict[PlotlyJs, str] = {
    "inline": "script-src 'unsafe-inline'",
    # The page's own folder, opened from disk (file:) or served ('self').
    "directory": "script-src 'unsafe-inline' 'self' file:",
    "cdn": "script-src 'unsafe-inline' https://cdn.plot.ly",
}


def csp(mode: PlotlyJs) -> str:
    """The page's Content-Security-Policy for plotly.js placed as ``mode`` says."""
    return f"{_BASE}; {_SCRIPTS[mode]}"


def include_argument(mode: PlotlyJs) -> bool | str:
    """plotly.io.to_html's ``include_plotlyjs`` for the page's first chart."""
    return True if mode == "inline" else mode


def place_beside(page: Path, mode: PlotlyJs) -> Path | None:
    """For ``directory``: plotly.min.js in the page's folder, written when missing or of
    another plotly version (the file is plotly's own bundle); None for the other modes."""
    if mode != "directory":
        return None
    from plotly.offline import get_plotlyjs

    path = page.parent / PLOTLY_FILE
    bundle = get_plotlyjs()
    if not path.is_file() or path.read_text(encoding="utf-8") != bundle:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(bundle, encoding="utf-8")
    return path


def how_it_opens(mode: PlotlyJs) -> str:
    """What the page's "generated" line says of where it works."""
    return {
        "inline": "works offline",
        "directory": f"works offline with {PLOTLY_FILE} beside it",
        "cdn": "its charts need the network (plotly.js from cdn.plot.ly)",
    }[mode]
