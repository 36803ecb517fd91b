"""Prompts repeated within a level: how many of its requests sent a prompt that another of
its requests had sent already (a target with a prefix cache may serve those from it).

Each worker takes the level's prompts in pool order from where it starts, cycling, and
says where that was (``WorkerSummary.first_prompt``) and how many it sent; the prompts a
level sent are the union of those runs. A pool may hold one prompt more than once (a
dataset smaller than the pool is cycled when the pool is built): prompts are told apart
by their text.
"""

from __future__ import annotations

from collections.abc import Sequence

from moeperf.collectors.serving_records import WorkerSummary
from moeperf.suites.serving.workload.sources import Prompt


def prompt_identities(prompts: Sequence[Prompt]) -> tuple[int, ...]:
    """Each prompt's identity in its pool: the position of the first prompt with its text."""
    first: dict[str, int] = {}
    return tuple(first.setdefault(prompt.text, i) for i, prompt in enumerate(prompts))


def repeated_prompts(reports: Sequence[WorkerSummary], identities: Sequence[int]) -> int | None:
    """The level's requests whose prompt another of its requests had sent already; None
    when a worker sent requests without saying where its prompts began (a trace level's
    requests bring their own prompts)."""
    size = len(identities)
    sent = 0
    seen: set[int] = set()
    for report in reports:
        if report.sent == 0:
            continue
        if report.first_prompt is None:
            return None
        start = report.first_prompt
        seen.update(identities[(start + k) % size] for k in range(min(report.sent, size)))
        sent += report.sent
    return sent - len(seen)
