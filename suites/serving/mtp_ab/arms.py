"""The arms of an MTP A/B run: where each one is served, and the block order.

- reference target: one target per arm (``mtp_tokens`` = its draft count, every other
  knob the spec's), all started before the first block and serving side by side; only
  the arm of the running block has work, the others wait idle;
- url target with ``mtp_ab.urls``: one server per arm, as given;
- url target with ``mtp_ab.hooks``: one server (``target.url``) that each arm's command
  reconfigures; the command runs before each block of that arm, and the target must
  answer within ``mtp_ab.hook_timeout_s`` after it exits.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from moeperf.collectors.mtp_ab_records import MtpAbBlock, block_scenario
from moeperf.suites.errors import UsageError
from moeperf.suites.serving.embedded.reference import running_reference
from moeperf.suites.serving.mode_spec import MtpAbSpec
from moeperf.suites.serving.preflight import TargetUnreachable, check_target
from moeperf.suites.serving.spec import ServingSpec

_HEALTH_POLL_S = 0.5


@dataclass(frozen=True, slots=True)
class Arm:
    drafts: int
    url: str
    hook: str | None = None  # run before each of the arm's blocks


def arm_spec(spec: ServingSpec, drafts: int) -> ServingSpec:
    reference = {**spec.target.reference, "mtp_tokens": drafts}
    return spec.model_copy(
        update={"target": spec.target.model_copy(update={"reference": reference})}
    )


@contextlib.contextmanager
def serving_arms(spec: ServingSpec) -> Iterator[tuple[list[Arm], dict[str, Any]]]:
    """The arms, their targets started where moeperf starts them, and a description of
    them for the manifest."""
    ab = spec.mtp_ab
    assert ab is not None
    if spec.target.kind == "reference":
        with contextlib.ExitStack() as stack:
            arms, configs = [], {}
            for drafts in ab.drafts:
                url, described = stack.enter_context(running_reference(arm_spec(spec, drafts)))
                arms.append(Arm(drafts, url))
                configs[str(drafts)] = described
            first = configs[str(ab.drafts[0])]
            yield (
                arms,
                {**first, "arms": {"mtp_tokens": list(ab.drafts), "urls": [a.url for a in arms]}},
            )
        return
    if ab.urls:
        arms = [Arm(d, u) for d, u in zip(ab.drafts, ab.urls, strict=True)]
    else:
        arms = [Arm(d, spec.target.url, h) for d, h in zip(ab.drafts, ab.hooks, strict=True)]
    yield (
        arms,
        {
            "kind": "url",
            "url": arms[0].url,
            "arms": {
                "mtp_tokens": list(ab.drafts),
                "urls": [a.url for a in arms],
                "hooks": bool(ab.hooks),  # the commands may hold secrets: not stored
            },
        },
    )


def order(drafts: list[int], round_: int) -> list[int]:
    """The arms of a round: in order in odd rounds, reversed in even ones (A B, B A ...)."""
    return list(drafts) if round_ % 2 else list(reversed(drafts))


def schedule(ab: MtpAbSpec, mode: str, levels: list[int]) -> list[MtpAbBlock]:
    """One mode's blocks in run order: per level, ``ab.blocks`` rounds of every arm."""
    return [
        MtpAbBlock(block_scenario(drafts, mode, streams, round_), drafts, mode, streams, round_)
        for streams in levels
        for round_ in range(1, ab.blocks + 1)
        for drafts in order(ab.drafts, round_)
    ]


def prepare(arm: Arm, ab: MtpAbSpec, get: Callable[[str, float], Any]) -> None:
    """Before a block of ``arm``: its hook, if it has one, then wait until the target
    answers (exit 2 naming what failed)."""
    if arm.hook is None:
        return
    try:
        done = subprocess.run(
            arm.hook, shell=True, timeout=ab.hook_timeout_s, capture_output=True, text=True
        )
    except subprocess.TimeoutExpired:
        raise UsageError(
            f"the mtp_ab hook of the k={arm.drafts} arm ran past mtp_ab.hook_timeout_s "
            f"({ab.hook_timeout_s:g} s)"
        ) from None
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip()[-300:]
        raise UsageError(
            f"the mtp_ab hook of the k={arm.drafts} arm exited {done.returncode}: {tail}"
        )
    deadline = time.monotonic() + ab.hook_timeout_s
    while True:
        try:
            check_target(arm.url, get)
            return
        except TargetUnreachable as exc:
            if time.monotonic() > deadline:
                raise UsageError(
                    f"after the k={arm.drafts} arm's hook, {arm.url} did not answer within "
                    f"{ab.hook_timeout_s:g} s: {exc}"
                ) from None
            time.sleep(_HEALTH_POLL_S)
