"""``moeperf plan memory``: the memory planner (suites/plan) on the command line.

Exit codes: 0 the plan fits, 1 it is over budget (the output names what overflows and the
changes that fit), 2 a model or deployment the planner cannot use (the message names it).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.console import Console

from moeperf.exits import EXIT_FAILED, EXIT_OK


def _plan_memory(args: argparse.Namespace, console: Console) -> int:
    from moeperf.suites.plan.deploy import load_deploy
    from moeperf.suites.plan.model_config import load_model_config
    from moeperf.suites.plan.plan import plan_memory
    from moeperf.suites.plan.present import plan_json, plan_lines, plan_table

    plan = plan_memory(load_model_config(Path(args.model)), load_deploy(Path(args.deploy)))
    console.print(plan_table(plan))
    for line in plan_lines(plan):
        console.print(line, markup=False, highlight=False)
    if args.json:
        Path(args.json).write_text(json.dumps(plan_json(plan), indent=2) + "\n")
    return EXIT_OK if plan.fits else EXIT_FAILED


def add_plan_commands(commands: Any) -> None:
    plan = commands.add_parser("plan", help="plan a deployment before running it")
    plan_commands = plan.add_subparsers(dest="plan_command", required=True)
    memory = plan_commands.add_parser(
        "memory",
        help="memory per device: weights, KV cache, activations, buffers; what fits "
        "(exit 0 fits, 1 over budget, 2 bad input)",
    )
    memory.add_argument("--model", required=True, help="a Hugging Face config.json")
    memory.add_argument("--deploy", required=True, help="the deployment, a TOML or JSON file")
    memory.add_argument("--json", help="also write the plan as JSON to this path")
    memory.set_defaults(handler=_plan_memory)
