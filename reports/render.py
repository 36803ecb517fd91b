"""One self-contained, offline HTML page from sections of charts and tables.

plotly.js is embedded once (with the first chart), nothing is loaded from anywhere: no
CDN, no font, no image, and a Content-Security-Policy that forbids any fetch says so to
the browser too. Every string that reaches the page is escaped here (``html.escape``),
whatever its source: spec, target, manifest, notes, model output. Figures carry their
own escaping of the text Plotly draws (``reports.figures.text``), and Plotly's JSON
escapes ``<``, ``>`` and ``/``, so no string can close the ``<script>`` that holds it.
"""

from __future__ import annotations

import html
import itertools
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio

from moeperf.reports.errors import ReportUsageError
from moeperf.reports.page_path import existing_message
from moeperf.reports.plotlyjs import PlotlyJs, csp, include_argument

# Plotly's modebar without the "Produced with Plotly" link (an external URL).
PLOTLY_CONFIG = {"displaylogo": False, "responsive": True}
# The default page's policy: inline scripts and styles only (reports.plotlyjs).
CSP = csp("inline")

STATUS_CLASSES = ("running", "complete", "aborted", "invalid", "failed")
_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 auto;
       max-width: 1200px; padding: 0 20px 60px; color: #1f2430; }
h1 { margin: 24px 0 4px; } h2 { border-bottom: 2px solid #dde3f0; padding-bottom: 4px;
       margin-top: 40px; }
.generated { color: #666; font-size: 90%; }
.conditions { display: grid; grid-template-columns: max-content 1fr; gap: 2px 16px;
       font-size: 92%; margin: 8px 0 12px; }
.conditions dt { color: #555; } .conditions dd { margin: 0; overflow-wrap: anywhere; }
.status-complete { color: #17723b; }
.status-aborted, .status-invalid, .status-failed { color: #b3261e; }
.status-running, .status-unknown { color: #8a5a00; }
.notes li { margin: 2px 0; }
details { margin: 4px 0; } summary { cursor: pointer; color: #2a3f8f; }
pre { background: #f6f8fb; padding: 10px; overflow-x: auto; font-size: 85%;
       white-space: pre-wrap; overflow-wrap: anywhere; }
.block { margin: 22px 0; }
.condition-line { font-size: 85%; color: #555; margin: 0 0 4px;
       border-left: 3px solid #dde3f0; padding-left: 8px; overflow-wrap: anywhere; }
.caption { font-size: 88%; color: #444; margin: 4px 0; }
.table-scroll { overflow-x: auto; max-width: 100%; }
table.data { border-collapse: collapse; font-size: 88%; margin: 6px 0; }
table.data th, table.data td { border: 1px solid #dde3f0; padding: 3px 8px; text-align: left;
       vertical-align: top; overflow-wrap: break-word; max-width: 420px; }
table.data th { background: #eef1f8; } td.num { text-align: right; white-space: nowrap; }
.answer { border-left: 4px solid #2a3f8f; padding-left: 12px; margin: 8px 0 20px; }
.answer .block { margin: 10px 0; }
nav ul { padding-left: 20px; } .appendix pre.doc { background: #fbfbf6; }
"""


@dataclass(frozen=True)
class Chart:
    """A Plotly figure with a caption under it.

    ``drawn_by`` names the figure modules (``reports.figures.<name>``) whose docstrings say
    how it is drawn: the appendix explains only the kinds a page contains.
    """

    figure: go.Figure
    caption: str = ""
    drawn_by: tuple[str, ...] = ()
    # It answers its suite's question: drawn first, on the page's first screen.
    answers: bool = False


@dataclass(frozen=True)
class Table:
    """A small DataFrame shown as an HTML table (cells escaped, numbers right-aligned)."""

    frame: pd.DataFrame
    caption: str = ""
    answers: bool = False  # as Chart.answers


@dataclass(frozen=True)
class Details:
    """Collapsible preformatted text (a spec, a fingerprint), closed by default."""

    summary: str
    text: str


@dataclass(frozen=True)
class Section:
    """One run (or one comparison): its status, the blocks that answer its question,
    its conditions, then the other blocks.

    ``facts`` are (label, value) pairs stated under the answer; ``condition_line`` is
    repeated above every chart so a chart cut out of the page still says what it measured.
    """

    title: str
    anchor: str
    facts: Sequence[tuple[str, str]] = ()
    status: str = ""  # running, complete, aborted or invalid
    status_reason: str | None = None
    notes: Sequence[str] = ()
    details: Sequence[Details] = ()
    condition_line: str = ""
    blocks: Sequence[Chart | Table] = field(default_factory=list)


def esc(value: Any) -> str:
    """Text for HTML content and attribute values."""
    return html.escape("" if value is None else str(value), quote=True)


def pretty_json(value: Any) -> str:
    """Indented JSON for a <pre> block (escaped by the caller, like any text)."""
    return json.dumps(value, indent=2, sort_keys=True, default=str, ensure_ascii=False)


def _cell(value: Any) -> tuple[str, bool]:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "-", False
    if isinstance(value, bool | np.bool_):
        return str(bool(value)), False
    if isinstance(value, int | np.integer):
        return f"{int(value):,}", True
    if isinstance(value, float | np.floating):
        number = float(value)
        # Four significant digits, but never an exponent for a count-like 16,384.
        return f"{number:,.0f}" if abs(number) >= 1000 else f"{number:.4g}", True
    text = str(value)
    # A figure written as text ("43 / 7", "0.91 [0.87, 0.98]", "12.5%") is a number too:
    # right-aligned and never broken across lines.
    return text, bool(_FIGURE.fullmatch(text)) and any(c.isdigit() for c in text)


# Digits with the separators, brackets and signs figures are written with; no letters.
_FIGURE = re.compile(r"[\d\s.,/%+\-\u2212\u2013\[\]()x=:<>~]+")


def table_html(table: Table) -> str:
    """An escaped HTML table of ``table.frame``."""
    head = "".join(f"<th>{esc(c)}</th>" for c in table.frame.columns)
    rows = []
    for values in table.frame.itertuples(index=False, name=None):
        cells = []
        for value in values:
            text, numeric = _cell(value)
            cls = ' class="num"' if numeric else ""
            cells.append(f"<td{cls}>{esc(text)}</td>")
        rows.append(f"<tr>{''.join(cells)}</tr>")
    caption = f'<p class="caption">{esc(table.caption)}</p>' if table.caption else ""
    # A table wider than the page scrolls inside its own box, instead of squeezing
    # its columns until words and figures break.
    return (
        f'<div class="table-scroll"><table class="data"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>{caption}"
    )


def chart_html(chart: Chart, div_id: str, *, include_plotlyjs: bool | str) -> str:
    """The chart's div and script; plotly.js itself (or the script tag that loads it,
    ``reports.plotlyjs``) only when ``include_plotlyjs``."""
    body = pio.to_html(
        chart.figure,
        full_html=False,
        include_plotlyjs=include_plotlyjs,
        include_mathjax=False,
        config=PLOTLY_CONFIG,
        div_id=div_id,
        validate=False,
    )
    caption = f'<p class="caption">{esc(chart.caption)}</p>' if chart.caption else ""
    return f'<div class="chart">{body}</div>{caption}'


def _facts_html(facts: Sequence[tuple[str, str]]) -> str:
    items = "".join(f"<dt>{esc(label)}</dt><dd>{esc(value)}</dd>" for label, value in facts)
    return f'<dl class="conditions">{items}</dl>' if items else ""


def _status_html(section: Section) -> str:
    if not section.status:
        return ""
    known = section.status if section.status in STATUS_CLASSES else "unknown"
    reason = f": {esc(section.status_reason)}" if section.status_reason else ""
    return (
        f'<p class="status status-{known}"><strong>status:</strong> '
        f"{esc(section.status)}{reason}</p>"
    )


def _section_html(
    section: Section, chart_numbers: Iterator[int], plotlyjs: PlotlyJs = "inline"
) -> str:
    parts = [f'<section class="run" id="{esc(section.anchor)}">', f"<h2>{esc(section.title)}</h2>"]
    parts.append(_status_html(section))
    # The answer first, so that the page's first screen answers the suite's question; the
    # conditions it holds under follow it.
    answer = [block for block in section.blocks if block.answers]
    if answer:
        parts.append(f'<div class="answer" id="answer-{esc(section.anchor)}">')
        parts += [_block_html(block, section, chart_numbers, plotlyjs) for block in answer]
        parts.append("</div>")
    parts.append(_facts_html(section.facts))
    if section.notes:
        notes = "".join(f"<li>{esc(note)}</li>" for note in section.notes)
        parts.append(f'<h3>Notes</h3><ul class="notes">{notes}</ul>')
    for item in section.details:
        parts.append(
            f"<details><summary>{esc(item.summary)}</summary><pre>{esc(item.text)}</pre></details>"
        )
    parts += [
        _block_html(block, section, chart_numbers, plotlyjs)
        for block in section.blocks
        if not block.answers
    ]
    parts.append("</section>")
    return "\n".join(parts)


def _block_html(
    block: Chart | Table, section: Section, chart_numbers: Iterator[int], plotlyjs: PlotlyJs
) -> str:
    parts = ['<div class="block">']
    if section.condition_line:
        parts.append(f'<p class="condition-line">{esc(section.condition_line)}</p>')
    if isinstance(block, Chart):
        number = next(chart_numbers)
        # plotly.js goes in once, with the first chart of the page.
        include = include_argument(plotlyjs) if number == 1 else False
        parts.append(chart_html(block, f"chart-{number}", include_plotlyjs=include))
    else:
        parts.append(table_html(block))
    parts.append("</div>")
    return "\n".join(parts)


def render_page(
    title: str,
    sections: Sequence[Section],
    appendix: str,
    *,
    generated: str = "",
    plotlyjs: PlotlyJs = "inline",
) -> str:
    """The whole page. ``appendix`` is trusted HTML (``reports.appendix`` escapes its
    text); everything else is escaped here. ``plotlyjs``: where plotly.js comes from
    (``reports.plotlyjs``; for "directory" the writer puts the file beside the page)."""
    chart_numbers = itertools.count(1)
    body = "\n".join(_section_html(s, chart_numbers, plotlyjs) for s in sections)
    toc = "".join(f'<li><a href="#{esc(s.anchor)}">{esc(s.title)}</a></li>' for s in sections)
    toc += '<li><a href="#definitions">Metric definitions</a></li>'
    generated_html = f'<p class="generated">{esc(generated)}</p>' if generated else ""
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{esc(csp(plotlyjs))}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{esc(title)}</title>
<style>{_STYLE}</style>
</head>
<body>
<h1>{esc(title)}</h1>
{generated_html}
<nav><ul>{toc}</ul></nav>
{body}
{appendix}
</body>
</html>
"""


def write_page(path: Path, page: str, *, replace: bool) -> None:
    """Write a page, its folder made if missing; a path that cannot be written is the
    user's to fix (exit 2), said without a traceback. Without ``replace`` an existing file
    is refused (exit 2), checked by the open itself ("x" mode), so a file that appeared
    while the page was built is not replaced either (``reports.page_path``)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w" if replace else "x", encoding="utf-8") as file:
            file.write(page)
    except FileExistsError:
        raise ReportUsageError(existing_message(path)) from None
    except OSError as exc:
        raise ReportUsageError(
            f"cannot write the report to {path}: {exc.strerror or exc}"
        ) from None
