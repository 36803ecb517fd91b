"""Reading queries back out of dashboard JSON, and filling in their variables.

For tests that run every panel's PromQL against a real Prometheus: `panel_queries()` lists
them, `substitute_variables()` does what Grafana would before sending one.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

# ${name}, ${name:format} or $name; Grafana's own variables start with `__`.
_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")
DEFAULT_RATE_INTERVAL = "1m"


def iter_panels(dashboard: Mapping) -> Iterator[Mapping]:
    """Every panel that is not a row, including those nested in collapsed rows."""
    for panel in dashboard.get("panels", []):
        if panel.get("type") == "row":
            yield from panel.get("panels", [])
        else:
            yield panel


def panel_queries(dashboard: Mapping) -> list[tuple[str, str]]:
    """(panel title, PromQL expression) for every target of every panel, in layout order."""
    return [
        (panel.get("title", ""), target["expr"])
        for panel in iter_panels(dashboard)
        for target in panel.get("targets", [])
        if "expr" in target
    ]


def variable_queries(dashboard: Mapping) -> list[tuple[str, str]]:
    """(variable name, query) for every query variable."""
    return [
        (v["name"], v["query"] if isinstance(v["query"], str) else v["query"].get("query", ""))
        for v in dashboard.get("templating", {}).get("list", [])
        if v.get("type") == "query"
    ]


def substitute_variables(expr: str, values: Mapping[str, str]) -> str:
    """`expr` with every `$var` / `${var}` / `${var:fmt}` replaced by `values[var]`.

    `$__rate_interval` becomes `values["__rate_interval"]`, `1m` unless given; `${datasource}`
    works like any other variable. A variable without a value raises KeyError naming it, so a
    query is never sent with a `$` left in it. Values are inserted as given (a regex such as
    `.*` for "All").
    """
    values = {"__rate_interval": DEFAULT_RATE_INTERVAL, **values}

    def replace(match: re.Match) -> str:
        name = match.group(1) or match.group(2)
        if name not in values:
            raise KeyError(f"no value for ${name} in {expr!r}")
        return values[name]

    return _VARIABLE.sub(replace, expr)
