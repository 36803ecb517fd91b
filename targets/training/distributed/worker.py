"""One rank of a distributed training job.

    python -m moeperf.targets.training.distributed.worker CONFIG.json

torchrun's environment contract: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (and LOCAL_RANK
for the GPU), so ``torchrun --nproc-per-node N -m moeperf.targets.training.distributed.worker
CONFIG.json`` runs it as well as the launcher does (which has its ranks meet through a
file, ``MOEPERF_DIST_STORE_FILE``, rather than a TCP store). The rank starts from the newest
complete sharded checkpoint in the config's ``out_dir`` (writing step 0's first when there
is none), trains, and writes a JSON line per step and per event to
``out_dir/records/rank-R.jsonl``. An OOM is written down and ends the process with exit
code 3: the launcher restarts the whole job, as a real job is restarted.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from moeperf.targets.training.checkpoint import TrainState
from moeperf.targets.training.distributed.comm import Comm, make_groups, ping_pong
from moeperf.targets.training.distributed.layout import LayoutError
from moeperf.targets.training.distributed.rank_step import RankEvent, RecordsFile, records_path
from moeperf.targets.training.distributed.rank_trainer import DistConfig, RankTrainer
from moeperf.targets.training.setup import TrainingConfigError
from moeperf.targets.training.skew import SkewProfileError

OOM_EXIT = 3
STORE_FILE_ENV = "MOEPERF_DIST_STORE_FILE"  # set by the launcher: the rendezvous file
CONFIG_EXIT = 2  # the configuration cannot run (the message says why): no restart helps
CONFIG_ERRORS = (TrainingConfigError, LayoutError, SkewProfileError)
COLLECTIVE_TIMEOUT_S = 120  # a peer that never comes (a hung rank) ends the job this late


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(
            "usage: python -m moeperf.targets.training.distributed.worker CONFIG.json",
            file=sys.stderr,
        )
        return 2
    config = DistConfig.from_json(Path(argv[0]).read_text())
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if world_size != config.layout.world_size:
        print(
            f"WORLD_SIZE {world_size} but the layout needs {config.layout.world_size}",
            file=sys.stderr,
        )
        return 2
    cfg = config.trainer
    if cfg.device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    backend = "nccl" if cfg.device == "cuda" else "gloo"
    # The launcher's ranks meet through a file (a FileStore): torchrun's TCPStore listens on
    # every interface, and one host needs no network for its rendezvous. Under torchrun
    # (no STORE_FILE_ENV), its environment's store.
    store_file = os.environ.get(STORE_FILE_ENV)
    dist.init_process_group(
        backend,
        init_method=f"file://{store_file}" if store_file else "env://",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=COLLECTIVE_TIMEOUT_S),
    )
    records = RecordsFile(records_path(Path(config.out_dir) / "records", rank))
    try:
        comm = Comm(rank, make_groups(config.layout.all_groups()))
        try:
            trainer = RankTrainer(config, rank, comm)
        except CONFIG_ERRORS as exc:
            print(f"error: {exc}", file=sys.stderr, flush=True)
            os._exit(CONFIG_EXIT)  # the peers would wait for this rank in a collective
        if config.attempt == 0 and config.layout.pp > 1:
            _measure_pipeline_link(trainer, records)
        state = _start(trainer, records)
        _train(trainer, state, records)
        dist.barrier()
    finally:
        records.close()
    dist.destroy_process_group()
    return 0


def _start(trainer: RankTrainer, records: RecordsFile) -> TrainState:
    config, rank = trainer.config, trainer.rank
    latest = trainer.checkpoints.latest()
    if latest is None:
        state = TrainState(step=0, next_sample=0)
        write_s = _checkpoint(trainer, state)
        records.write(
            RankEvent(
                "started",
                rank,
                config.attempt,
                time.monotonic_ns(),
                0,
                {"checkpoint_write_s": write_s},
            )
        )
        return state
    state, restore_s = trainer.checkpoints.restore(trainer.model, trainer.optimizer)
    records.write(
        RankEvent(
            "restored",
            rank,
            config.attempt,
            time.monotonic_ns(),
            state.step,
            {"restore_s": restore_s},
        )
    )
    return state


def _measure_pipeline_link(trainer: RankTrainer, records: RecordsFile) -> None:
    """The link between neighbouring stages, with the activation a step sends over it: what
    the cluster simulator's pipeline hop is calibrated with."""
    layout, coords = trainer.layout, trainer.coords
    hop = layout.dp * layout.ep  # ranks from one stage to the next
    for stage in range(layout.pp - 1):  # one pair of stages at a time
        if coords.stage in (stage, stage + 1):
            lead = coords.stage == stage
            one_way_s = ping_pong(trainer.activation, trainer.rank + (hop if lead else -hop), lead)
            if lead:
                records.write(
                    RankEvent(
                        "link",
                        trainer.rank,
                        trainer.config.attempt,
                        time.monotonic_ns(),
                        0,
                        {
                            "bytes": trainer.activation.numel() * trainer.activation.element_size(),
                            "one_way_s": one_way_s,
                        },
                    )
                )
        dist.barrier()


def _checkpoint(trainer: RankTrainer, state: TrainState) -> float:
    write_s = trainer.checkpoints.write_shard(trainer.model, trainer.optimizer, state)
    dist.barrier()  # every shard on disk before the step is marked complete
    if trainer.rank == 0:
        trainer.checkpoints.mark_complete(state.step, trainer.layout.world_size)
    return write_s


def _train(trainer: RankTrainer, state: TrainState, records: RecordsFile) -> None:
    config = trainer.config
    cfg = config.trainer
    while state.step < cfg.steps:
        try:
            result, next_state = trainer.step(state)
        except trainer.budget.oom_errors as error:
            samples, _ = trainer.samples_for_step(state.next_sample)
            message = str(error).splitlines()[0]
            records.write(
                RankEvent(
                    "oom",
                    trainer.rank,
                    config.attempt,
                    time.monotonic_ns(),
                    state.step,
                    {"message": message, "samples": samples},
                )
            )
            records.close()
            # The peers wait in a collective that will not complete: leave now, the
            # launcher stops them and restarts the job.
            os._exit(OOM_EXIT)
        state = next_state
        events: list[dict] = []
        if result.step < config.replayed_below:
            events.append({"kind": "replay", "step": result.step})
        if state.step % cfg.checkpoint_every == 0:
            write_s = _checkpoint(trainer, state)
            events.append({"kind": "checkpoint", "step": state.step, "write_s": write_s})
        records.write(dataclasses.replace(result, events=events))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
