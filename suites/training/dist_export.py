"""Live export of a training-dist run ([export], the Pushgateway): the job's steps, as the
one-process trainer exports its own, labelled with the scenario.

Every rank reports each step as it ends; a step of the job is exported once every rank
has reported that execution of it (a step run again after a restart is exported again, as
work done). Its time is the first rank's start to the last rank's end, its tokens the last
stage's, its MFU the job's (model FLOPs of every rank / (time x peak per rank x ranks)),
its peak memory the highest rank's. OOMs count each rank's OOM event, restarts each attempt
that restored a checkpoint. Expert-load imbalance is not exported: each rank counts the
routing of its own tokens in its own layers, and no merge of them is the job's.
"""

from __future__ import annotations

from moeperf.collectors.dist_training_summary import job_step
from moeperf.collectors.export.live_export import LiveExporter
from moeperf.collectors.records import StepRecord
from moeperf.targets.training.distributed.rank_step import RankEvent


class JobExport:
    """One scenario's job: its ranks' records in, the job's steps out."""

    def __init__(
        self,
        exporter: LiveExporter,
        scenario: str,
        world_size: int,
        pp: int,
        peak_flops_per_s: float,
    ):
        self._exporter = exporter
        self._scenario = scenario
        self._world_size = world_size
        self._pp = pp
        self._peak = peak_flops_per_s
        # (attempt, step) -> the ranks' records of that execution, until all are in.
        self._pending: dict[tuple[int, int], list[StepRecord]] = {}
        self._restored: set[int] = set()

    def step(self, record: StepRecord) -> None:
        key = (record.attempt or 0, record.step)
        ranks = self._pending.setdefault(key, [])
        ranks.append(record)
        if len(ranks) < self._world_size:
            return
        del self._pending[key]
        job = job_step(ranks, self._pp)
        time_s = job.step_time_s
        mfu = job.model_flops / (time_s * self._peak * self._world_size) if time_s > 0 else None
        self._exporter.observe_training_step(
            time_s, job.tokens, mfu, job.peak_memory_bytes, self._scenario
        )

    def event(self, event: RankEvent) -> None:
        if event.kind == "oom":
            self._exporter.observe_oom(self._scenario)
        elif event.kind == "restored" and event.attempt not in self._restored:
            self._restored.add(event.attempt)  # every rank restores: one restart
            self._exporter.observe_restart(self._scenario)
