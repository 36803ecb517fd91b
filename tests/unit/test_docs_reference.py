"""The generated reference pages (docs/reference/, docs/concepts/metrics.md) match the code.

A page out of date fails here with the command that regenerates it; the other tests check
that each generator reads what it says it reads: a spec field's comment, a CLI flag, a
shipped spec, a metric family, an exit code.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from moeperf.cli import build_parser
from moeperf.collectors.export.metric_names import ALL_METRICS
from moeperf.docs.docstring_markdown import docstring_markdown
from moeperf.docs.field_comments import class_field_comments
from moeperf.docs.pages import PAGES, REGENERATE, render, stale_pages
from moeperf.docs.type_text import type_text
from moeperf.suites.serving.spec_tables import HarnessSpec, LoadSpec
from moeperf.suites.spec_files import shipped_spec_names

# The checkout's docs/ (the tests run against the installed wheel, which has none).
REPO = Path(__file__).resolve().parents[2]


def test_every_generated_page_is_up_to_date():
    stale = stale_pages(REPO / "docs")
    assert not stale, f"out of date: {stale}; regenerate with: {REGENERATE}"


def test_a_spec_fields_comment_type_and_default_reach_the_page():
    text = render("reference/spec-fields.md")
    row = next(line for line in text.splitlines() if line.startswith("| `max_loop_lag_p99_s`"))
    assert "| number (> 0) | `0.002` | s |" in row
    assert "The run is invalid when the client, not the target, may have set the numbers." in row
    # A free-form table checked elsewhere ([target.reference]) lists the checking class's
    # fields; a table met again links to its first section instead of repeating it.
    assert "### serving: `[target.reference]`" in text and "| `num_kv_blocks` |" in text
    assert "The same fields as [serving: `[target]`](#serving-target)." in text


@dataclasses.dataclass
class _Commented:
    # Above the field,
    # on two lines.
    above: int = 0
    trailing: int = 1  # At the end of its line.
    bare: int = 2

    # A comment with a blank line before the next field is not that field's.

    after_blank: int = 3
    tool: int = 4  # fmt: skip


def test_comments_are_read_above_a_field_and_at_the_end_of_its_line():
    assert class_field_comments(_Commented) == {
        "above": "Above the field, on two lines.",
        "trailing": "At the end of its line.",
    }  # none invented for bare, after_blank, or a comment meant for a tool
    assert class_field_comments(HarnessSpec)["max_loop_lag_p99_s"].startswith("The run is")


def test_types_read_as_a_spec_writer_reads_them():
    fields = LoadSpec.model_fields
    assert type_text(fields["levels"].annotation) == "list of number (> 0)"
    assert type_text(fields["workers"].annotation) == 'integer (>= 1) or one of "auto"'
    assert type_text(fields["duration_s"].annotation) == "number (> 0), or unset"


def test_every_command_and_flag_is_on_the_cli_page():
    text = render("reference/cli.md")

    def walk(parser: argparse.ArgumentParser, prog: str) -> None:
        assert f"`{prog}`" in text, prog
        for action in parser._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert f"`{flag}" in text, (prog, flag)
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{prog} {name}")

    walk(build_parser(), "moeperf")


def test_every_shipped_spec_metric_family_and_exit_code_is_listed():
    specs = render("reference/specs.md")
    assert all(f"| `{name}` |" in specs for name in shipped_spec_names())
    metrics = render("reference/prometheus-metrics.md")
    assert all(f"`{m.sample_name}`" in metrics for m in ALL_METRICS)
    exits = render("reference/exit-codes.md")
    assert all(f"| `{code}` |" in exits for code in (0, 1, 2, 130))


def test_the_definitions_page_quotes_the_report_appendixs_text():
    from moeperf.collectors import latency
    from moeperf.reports.appendix import DEFINITIONS, docstrings

    text = render("concepts/metrics.md")
    for _, docstring in docstrings(DEFINITIONS):
        body = docstring.partition("\n")[2]
        assert docstring_markdown(body) in text
    ttft = next(line for line in docstring_markdown(latency.__doc__ or "").splitlines()
                if line.startswith("- TTFT:"))  # fmt: skip
    assert "intended send time -> arrival of the first chunk" in ttft


def test_docstring_markdown_keeps_lists_and_joins_paragraphs():
    text = "Intro line one\nline two:\n- a: first\n  continued\n- b: second\nAfter.\n"
    assert docstring_markdown(text) == (
        "Intro line one line two:\n\n- a: first continued\n- b: second\n\nAfter.\n"
    )


def test_the_pages_are_the_ones_the_site_lists():
    nav = (REPO / "mkdocs.yml").read_text()
    assert all(page in nav for page in PAGES)
