"""``moeperf target``: the reference targets themselves, to serve the tiny MoE or train it.

``moeperf target serve [--model DIR] [--host H] [--port N] [knob flags...]`` runs
``python -m moeperf.targets.serving`` in this process, and ``moeperf target train --out DIR
[--steps N ...]`` runs ``python -m moeperf.targets.model.train``. Their flags belong to them, so
every argument after ``serve`` or ``train`` is handed over unchanged, and
``moeperf target serve --help`` prints the server's own help, under the name
``moeperf target serve`` (the server's ``main`` takes the name to show). The targets are
imported only when one is run: the rest of the CLI loads without torch.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from typing import Any

from rich.console import Console

from moeperf.exits import EXIT_INTERRUPTED
from moeperf.suites import reference_install
from moeperf.suites.errors import UsageError

_INSTALL = reference_install.REFERENCE_INSTALL
SERVE_PROG = "moeperf target serve"
TRAIN_PROG = "moeperf target train"


def _entry_point(module: str) -> Callable[..., int | None]:
    """``module.main``, or a UsageError (exit 2) saying how to install what it needs."""
    if not reference_install.torch_installed():
        raise UsageError(f"{module} needs PyTorch and the reference extra: {_INSTALL}")
    try:
        return importlib.import_module(module).main
    except ModuleNotFoundError as exc:
        raise UsageError(
            f"{module} cannot be imported ({exc}); install the reference extra: {_INSTALL}"
        ) from None


def _delegate(module: str, argv: list[str], **named: Any) -> int:
    main = _entry_point(module)
    try:
        return int(main(argv, **named) or 0)
    except KeyboardInterrupt:
        # The target stops on SIGINT by itself; this is a second Ctrl-C during its shutdown.
        return EXIT_INTERRUPTED


def serve_command(args: argparse.Namespace, _console: Console) -> int:
    return _delegate("moeperf.targets.serving.__main__", list(args.target_args), prog=SERVE_PROG)


def train_command(args: argparse.Namespace, _console: Console) -> int:
    return _delegate("moeperf.targets.model.train", list(args.target_args), prog=TRAIN_PROG)


def _passthrough(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    help_text: str,
    delegate: str,
) -> argparse.ArgumentParser:
    # prefix_chars="+": no argument looks like an option here, so all reach the target.
    parser = commands.add_parser(
        name,
        help=help_text,
        description=f"{help_text}. Every argument is passed to `{delegate}`; "
        f"`moeperf target {name} --help` prints its flags.",
        add_help=False,
        prefix_chars="+",
    )
    parser.add_argument("target_args", nargs="*", metavar="ARG", help=f"flags of {delegate}")
    return parser


def add_target_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    target = commands.add_parser(
        "target", help="the reference targets: serve the tiny MoE over HTTP, or train it"
    )
    sub = target.add_subparsers(dest="target_command", required=True)
    serve = _passthrough(
        sub,
        "serve",
        "serve the reference MoE (OpenAI-compatible API, /metrics) until Ctrl-C or SIGTERM",
        "python -m moeperf.targets.serving",
    )
    serve.set_defaults(handler=serve_command)
    train = _passthrough(
        sub,
        "train",
        "train the reference MoE into a model directory (--out DIR)",
        "python -m moeperf.targets.model.train",
    )
    train.set_defaults(handler=train_command)
