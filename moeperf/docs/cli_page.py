"""reference/cli.md: every command and flag, walked from the CLI's own argument parser."""

from __future__ import annotations

import argparse

from moeperf.cli import build_parser
from moeperf.docs.markdown import GENERATED, code, table


def page() -> str:
    parser = build_parser()
    parts = [
        "# Command line\n\n",
        GENERATED,
        "\nEvery command and flag of `moeperf`, from its argument parser (`moeperf --help` "
        "and `moeperf COMMAND --help` print the same). Exit codes: "
        "[Exit codes](exit-codes.md).\n",
    ]
    parts += _commands(parser, "moeperf", "")
    return "".join(parts)


def _commands(parser: argparse.ArgumentParser, prog: str, help_text: str) -> list[str]:
    depth = min(prog.count(" ") + 2, 4)
    anchor = prog.replace(" ", "-")
    parts = [f"\n{'#' * depth} `{prog}` {{#{anchor}}}\n\n"]
    if help_text:
        parts.append(help_text[0].upper() + help_text[1:] + ".\n\n")
    if parser.description and prog == "moeperf":
        parts.append(parser.description.strip() + "\n\n")
    usage = " ".join(parser.format_usage().split())
    parts.append(f"```text\n{usage.removeprefix('usage: ')}\n```\n\n")
    rows = [_row(a) for a in parser._actions if not _skipped(a)]
    if rows:
        parts.append(table(("argument", "default", "description"), rows))
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                parts += _commands(sub, f"{prog} {name}", helps.get(name, ""))
    return parts


def _skipped(action: argparse.Action) -> bool:
    return isinstance(action, (argparse._HelpAction, argparse._SubParsersAction))


def _row(action: argparse.Action) -> tuple[str, str, str]:
    if action.option_strings:
        takes_value = action.nargs != 0
        metavar = action.metavar or (action.dest.upper() if takes_value else "")
        if isinstance(metavar, tuple):
            metavar = " ".join(metavar)
        # Each spelling its own code span, as argparse writes them ("-v, --verbose").
        suffix = f" {metavar}" if metavar else ""
        name = ", ".join(code(option + suffix) for option in action.option_strings)
    else:
        name = code(str(action.metavar or action.dest))
    help_text = (action.help or "") % {"default": action.default, "prog": ""}
    if action.choices is not None:
        help_text += " (one of: " + ", ".join(str(c) for c in action.choices) + ")"
    default = action.default
    shown = "" if default in (None, False, argparse.SUPPRESS) else code(str(default))
    return name, shown, help_text
