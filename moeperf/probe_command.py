"""``moeperf probe URL [--api chat|completions] [--model M]``: what a target supports.

The pre-flight (GET /v1/models) and then the probe's bounded requests
(suites/serving/probe/probe.py); prints a table of what was found and the ``[target]``
section that fits, and writes the result as JSON (``--json``, default under
``<runs-dir>/probes/``). A target that does not answer, or does not answer as an
OpenAI-compatible stream, exits 2 with what it said.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import re
from pathlib import Path
from typing import Any

from rich.console import Console

from moeperf.exits import EXIT_OK
from moeperf.suites.errors import UsageError


def add_probe_command(commands: Any) -> None:
    probe = commands.add_parser(
        "probe",
        help="find out what an OpenAI-compatible target supports (a few bounded requests)",
        description=(
            "Send a few small requests (8 tokens each) to find out what the target supports "
            "and how it streams: models, [DONE], role chunk, usage, continuous_usage_stats, "
            "logprobs, ignore_eos / min_tokens, tokens per chunk, /tokenize, /metrics and "
            "its dialect, a prefix-cache reset endpoint. Prints a table and the [target] "
            "spec section that fits; writes the result as JSON."
        ),
    )
    probe.add_argument("url", help="the target's base URL, e.g. http://127.0.0.1:8000")
    probe.add_argument(
        "--api", choices=("chat", "completions"), default="chat", help="default: chat"
    )
    probe.add_argument(
        "--model", default="", help="model to ask for (default: the first /v1/models lists)"
    )
    probe.add_argument(
        "--api-key-env",
        default="",
        metavar="VAR",
        help="send $VAR's value as 'Authorization: Bearer ...' (never printed or written)",
    )
    probe.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="send a fixed header (repeatable)",
    )
    probe.add_argument(
        "--json",
        metavar="PATH",
        help="where to write the result (default: <runs-dir>/probes/HOST_PORT-TIME.json)",
    )
    probe.set_defaults(handler=probe_command)


def _fixed_headers(pairs: list[str]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"--header {pair!r}: give NAME=VALUE, e.g. --header X-Org=acme")
        headers[name.strip()] = value
    return headers


def _default_path(runs_dir: str, url: str) -> Path:
    where = re.sub(r"[^A-Za-z0-9.]+", "_", url.split("://", 1)[-1]).strip("_")
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path(runs_dir) / "probes" / f"{where}-{stamp}.json"


def probe_command(args: argparse.Namespace, console: Console) -> int:
    from pydantic import ValidationError

    from moeperf.suites.serving.load.auth import request_headers
    from moeperf.suites.serving.preflight import check_target, http_get, served_model
    from moeperf.suites.serving.probe.present import probe_table, target_toml
    from moeperf.suites.serving.probe.probe import probe_target
    from moeperf.suites.serving.target_spec import TargetSpec
    from moeperf.suites.spec_errors import problems_of, spec_error

    url = args.url.rstrip("/")
    try:
        target = TargetSpec(
            kind="url",
            url=url,
            api=args.api,
            api_key_env=args.api_key_env,
            headers=_fixed_headers(args.header),
        )
    except ValidationError as exc:
        raise spec_error("moeperf probe", problems_of(exc, TargetSpec, ("target",))) from None
    headers = request_headers(target, os.environ)
    check = check_target(url, functools.partial(http_get, headers=headers))
    model = served_model(args.model, check, url)
    import asyncio

    result = asyncio.run(probe_target(url, args.api, model, check.models, headers))
    console.print(probe_table(result))
    console.print("spec section that fits this target:", style="bold")
    console.print(target_toml(result, args.api_key_env or ""), markup=False, highlight=False)
    path = Path(args.json) if args.json else _default_path(args.runs_dir, url)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result.to_dict(), indent=2) + "\n", encoding="utf-8")
    console.print(f"probe result: {path}", markup=False, highlight=False)
    return EXIT_OK
