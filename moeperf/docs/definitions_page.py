"""concepts/metrics.md: the metric definitions, quoted from the modules that compute them.

The same modules, in the same order, as the report's appendix (reports/appendix.py): one
source, so the docs, every report and the code say the same thing. The charts' docstrings
follow, all of them (a report explains only the charts it draws).
"""

from __future__ import annotations

from types import ModuleType

from moeperf.docs.docstring_markdown import docstring_markdown
from moeperf.docs.markdown import GENERATED
from moeperf.reports.appendix import CHARTS, DEFINITIONS, docstrings

_INTRO = """\
What every figure moeperf prints means, quoted word for word from the module that
computes it. Every HTML report ends with the same text (its appendix), so a report, these
pages and the code cannot disagree. In short: **TTFT** is the time from when a request was
meant to be sent to its first generated token; **TPOT** the time per output token after the
first, per request; **ITL** the gap between tokens, one sample per token; **E2E** the whole
request; **goodput** the requests per second that met every SLO. The exact rules follow.
"""


def page() -> str:
    parts = ["# Metric definitions\n\n", GENERATED, "\n", " ".join(_INTRO.split()), "\n"]
    parts += _entries(DEFINITIONS, level=2)
    parts.append("\n## How the charts are drawn\n\n")
    parts.append("Each report chart's module says what it plots and from which figures.\n")
    parts += _entries(CHARTS, level=3)
    return "".join(parts)


def _entries(modules: tuple[ModuleType, ...], level: int) -> list[str]:
    parts = []
    for name, text in docstrings(modules):
        title, _, body = text.partition("\n")
        path = name.replace(".", "/") + ".py"
        anchor = name.rsplit(".", 1)[-1].replace("_", "-")
        parts.append(f"\n{'#' * level} {title.rstrip('.')} {{#{anchor}}}\n\n")
        parts.append(f"*Source: `{path}`*\n\n")
        if body.strip():
            parts.append(docstring_markdown(body))
    return parts
