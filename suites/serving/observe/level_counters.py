"""The reference target's own counters over each load level of a run.

The run's scraper stores the canonical series of every dialect; speculative decoding
per draft position, draft rounds and engine steps are the reference engine's own, so a
benchmark that wants them reads ``/metrics`` itself: ``LevelCounterProbe`` is a runner
``Progress`` that scrapes when a level starts and when it ends, while the target is up,
and keeps the increase of every ``reference_*_total`` counter over the level. Requests of
the warm-up and cool-down phases are in these counts (the server cannot tell them apart).
"""

from __future__ import annotations

import urllib.request
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from collectors.store import RunWriter
from suites.serving.runner import LevelOutcome, Progress

Labels = tuple[tuple[str, str], ...]
CounterValues = dict[tuple[str, Labels], float]  # (sample name, sorted labels) -> value

_PREFIX = "reference_"
_TIMEOUT_S = 10.0


def parse_counters(text: str) -> CounterValues:
    """Every ``reference_*_total`` counter sample of a Prometheus text exposition."""
    values: CounterValues = {}
    for family in text_string_to_metric_families(text):
        if family.type != "counter" or not family.name.startswith(_PREFIX):
            continue
        for sample in family.samples:
            if sample.name.endswith("_total"):
                values[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return values


def scrape_counters(base_url: str, timeout_s: float = _TIMEOUT_S) -> CounterValues:
    with urllib.request.urlopen(base_url.rstrip("/") + "/metrics", timeout=timeout_s) as answer:
        return parse_counters(answer.read().decode("utf-8", errors="replace"))


@dataclass(frozen=True)
class LevelCounters:
    """Increases of the reference engine's counters over one level. Prefix-cache counts
    are in prompt tokens, as vLLM counts them; a draft is one request's speculative step."""

    steps: float
    generation_tokens: float
    drafts: float
    draft_tokens: float
    accepted_tokens: float
    accepted_by_position: tuple[float, ...]  # draft position 1, 2, ...
    prefix_cache_queries_tokens: float
    prefix_cache_hits_tokens: float

    @classmethod
    def between(cls, before: CounterValues, after: CounterValues) -> LevelCounters:
        def increase(name: str, labels: Labels = ()) -> float:
            key = (name, labels)
            return max(0.0, after.get(key, 0.0) - before.get(key, 0.0))

        per_position = "reference_spec_decode_accepted_tokens_per_position_total"
        positions = sorted(
            (labels for name, labels in after if name == per_position),
            key=lambda labels: int(dict(labels).get("position", "0")),
        )
        return cls(
            steps=increase("reference_steps_total"),
            generation_tokens=increase("reference_generation_tokens_total"),
            drafts=increase("reference_spec_decode_num_drafts_total"),
            draft_tokens=increase("reference_spec_decode_draft_tokens_total"),
            accepted_tokens=increase("reference_spec_decode_accepted_tokens_total"),
            accepted_by_position=tuple(increase(per_position, p) for p in positions),
            prefix_cache_queries_tokens=increase("reference_prefix_cache_queries_total"),
            prefix_cache_hits_tokens=increase("reference_prefix_cache_hits_total"),
        )

    @property
    def accepted_tokens_per_step(self) -> float | None:
        """Tokens one request commits per speculative step: the verified token plus the
        accepted drafts (1 + accepted / drafts). None without drafts."""
        return 1 + self.accepted_tokens / self.drafts if self.drafts else None

    @property
    def acceptance_by_position(self) -> tuple[float, ...]:
        """The fraction of drafts whose token at each position was accepted."""
        if not self.drafts:
            return ()
        return tuple(accepted / self.drafts for accepted in self.accepted_by_position)

    @property
    def draft_acceptance_ratio(self) -> float | None:
        """Accepted draft tokens / draft tokens."""
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else None

    @property
    def prefix_cache_hit_ratio(self) -> float | None:
        """Prompt tokens served from the prefix cache / prompt tokens looked up."""
        queries = self.prefix_cache_queries_tokens
        return self.prefix_cache_hits_tokens / queries if queries else None

    @property
    def generation_tokens_per_step(self) -> float | None:
        """Output tokens per engine step: the batch the engine kept running, times MTP."""
        return self.generation_tokens / self.steps if self.steps else None


class LevelCounterProbe(Progress):
    """Pass as the runner's ``progress`` and its ``attach`` as ``on_started``; afterwards
    ``levels`` maps each scenario (``c=16``) to its ``LevelCounters``."""

    def __init__(self, inner: Progress | None = None) -> None:
        self.levels: dict[str, LevelCounters] = {}
        self._inner = inner or Progress()
        self._url: str | None = None
        self._before: CounterValues = {}

    def attach(self, run: RunWriter) -> None:
        self._url = run.manifest.target["url"]

    def level_started(self, scenario: str, duration_s: float) -> None:
        if self._url is not None:
            self._before = scrape_counters(self._url)
        self._inner.level_started(scenario, duration_s)

    def level_done(self, outcome: LevelOutcome) -> None:
        if self._url is not None:
            after = scrape_counters(self._url)
            self.levels[outcome.scenario] = LevelCounters.between(self._before, after)
        self._inner.level_done(outcome)

    def finished(self, status: str) -> None:
        self._inner.finished(status)

    def tick(self) -> None:
        self._inner.tick()
