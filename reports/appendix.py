"""The report's appendix: metric definitions, taken from the code that computes them.

The module docstrings of ``collectors.latency``, ``collectors.summary`` and
``collectors.quantiles`` are the single source of truth for what TTFT, TPOT, ITL, E2E,
throughput, goodput and the percentiles mean; the docstrings of the figure modules say
how each chart is drawn from them. Quoting them here means the report and the code
cannot disagree. Everything is escaped and shown as preformatted text.
"""

from __future__ import annotations

import html
import inspect
from types import ModuleType

from collectors import latency, quantiles, summary
from reports.figures import (
    cdf,
    concurrency,
    errors,
    expert_load,
    forest,
    memory,
    micro,
    percentiles,
    prefill,
    steps,
    timeline,
    training_events,
    training_throughput,
)

DEFINITIONS: tuple[ModuleType, ...] = (latency, summary, quantiles)
CHARTS: tuple[ModuleType, ...] = (
    concurrency,
    percentiles,
    cdf,
    timeline,
    prefill,
    errors,
    forest,
    steps,
    training_throughput,
    training_events,
    memory,
    expert_load,
    micro,
)


def docstrings(modules: tuple[ModuleType, ...]) -> list[tuple[str, str]]:
    """(module name, cleaned docstring) of each module that has one."""
    return [(m.__name__, inspect.cleandoc(m.__doc__)) for m in modules if m.__doc__]


def _entries(modules: tuple[ModuleType, ...]) -> str:
    return "\n".join(
        f'<h4><code>{html.escape(name)}</code></h4>\n<pre class="doc">{html.escape(text)}</pre>'
        for name, text in docstrings(modules)
    )


def appendix_html() -> str:
    """The appendix section: metric definitions, then how the charts are drawn."""
    return (
        '<section class="appendix" id="definitions">\n'
        "<h2>Metric definitions</h2>\n"
        "<p>Quoted from the modules that compute them: what the code does is what is "
        "written here.</p>\n"
        f"{_entries(DEFINITIONS)}\n"
        "<h3>How the charts are drawn</h3>\n"
        f"{_entries(CHARTS)}\n"
        "</section>"
    )
