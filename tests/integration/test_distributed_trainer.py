"""The reference trainer across processes (targets/training/distributed): expert, pipeline
and data parallel ranks train what the single-process trainer trains, their all-to-alls
move exactly the realized expert loads, and the launcher brings a job back from a killed
rank and from an OOM.

Each launch starts real worker processes (gloo over loopback), ~5 s apiece; the runs are
module fixtures, shared by the tests that read them."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from moeperf.targets.model.config import MoEConfig
from moeperf.targets.training.distributed.launcher import (
    JobResult,
    KillRank,
    LaunchConfigError,
    LaunchError,
    launch,
)
from moeperf.targets.training.distributed.layout import Layout, local_experts
from moeperf.targets.training.distributed.rank_step import RankStep
from moeperf.targets.training.distributed.rank_trainer import DistConfig
from moeperf.targets.training.setup import TrainerConfig, build
from moeperf.targets.training.trainer import Trainer

pytestmark = pytest.mark.slow

MODEL = MoEConfig(
    hidden_size=64, expert_hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
    num_experts=4, top_k=2, mtp_depth=1,
)  # fmt: skip
STEPS = 4
MICROBATCHES, MICRO_BATCH_SIZE, SEQ_LEN = 4, 2, 32
STEP_SLOTS = MICROBATCHES * MICRO_BATCH_SIZE * SEQ_LEN * MODEL.top_k  # token-slots per layer
EP, PP, DP = Layout(ep=2), Layout(pp=2), Layout(dp=2)

# The fault runs: 6 steps under a replayed routing where samples 12 and 14 (step 3's first
# micro-batch on ranks 0 and 1) send nearly every token-slot to experts 0 and 1, rank 0's
# under EP=2. (A rank whose experts receive nothing at all: tests/unit/test_dist_ep_moe.py.)
FAULT_STEPS = 6
SPIKE_STEP, SPIKE_SAMPLES = 3, (12, 14)
CALM = {"tokens_per_expert": [[1, 1, 1, 1]] * MODEL.num_layers}
SPIKE = {"tokens_per_expert": [[10, 10, 1, 1]] * MODEL.num_layers}


@pytest.fixture(scope="module")
def tokens(tmp_path_factory) -> str:
    """A saved token stream the ranks load (what launcher.prepare_token_stream writes, from
    seeded random tokens rather than the tokenized corpus: seconds cheaper, same shapes)."""
    path = tmp_path_factory.mktemp("tokens") / "tokens.pt"
    generator = torch.Generator().manual_seed(0)
    torch.save(torch.randint(0, MODEL.vocab_size, (20_000,), generator=generator), path)
    return str(path)


@pytest.fixture(scope="module")
def replay_file(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("replay") / "routing.jsonl"
    lines = [SPIKE if m in SPIKE_SAMPLES else CALM for m in range(64)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


def trainer_config(tokens: str, **changes) -> TrainerConfig:
    base = TrainerConfig(
        model=MODEL, init_from=None, seq_len=SEQ_LEN, micro_batch_size=MICRO_BATCH_SIZE,
        microbatches=MICROBATCHES, steps=STEPS, threads=1, checkpoint_every=2,
        token_stream_path=tokens, expert_parallel=1,
    )  # fmt: skip
    return replace(base, **changes)


def fault_config(tokens: str, replay_file: str, **changes) -> TrainerConfig:
    return trainer_config(
        tokens, steps=FAULT_STEPS, skew="replay", replay_path=replay_file, **changes
    )


def single_process(cfg: TrainerConfig, out: Path) -> tuple[list[float], dict]:
    """The single-process trainer's per-step losses and final weights."""
    results = list(Trainer(build(replace(cfg, checkpoint_dir=str(out)))).steps())
    assert [r.step for r in results] == list(range(cfg.steps))
    final = torch.load(out / f"step-{cfg.steps:08d}.pt", weights_only=True)["model"]
    return [r.loss for r in results], final


@pytest.fixture(scope="module")
def single(tmp_path_factory, tokens):
    return single_process(trainer_config(tokens), tmp_path_factory.mktemp("single"))


@pytest.fixture(scope="module")
def single_skewed(tmp_path_factory, tokens, replay_file):
    return single_process(fault_config(tokens, replay_file), tmp_path_factory.mktemp("skewed"))


@pytest.fixture(scope="module")
def run(tmp_path_factory, tokens) -> Callable[[Layout], tuple[JobResult, Path]]:
    """``run(layout)``: the job on the tiny config (launched once per layout)."""
    done: dict[Layout, tuple[JobResult, Path]] = {}

    def get(layout: Layout) -> tuple[JobResult, Path]:
        if layout not in done:
            out = tmp_path_factory.mktemp(layout.name)
            done[layout] = (launch(DistConfig(trainer_config(tokens), layout, str(out))), out)
        return done[layout]

    return get


@pytest.fixture(scope="module")
def drill(tmp_path_factory, tokens, replay_file) -> tuple[JobResult, Path]:
    """EP=2, rank 1 killed during step 3 (after reporting step 2): the step-2 checkpoint
    is the newest complete one, so step 2 is replayed."""
    out = tmp_path_factory.mktemp("drill")
    config = DistConfig(fault_config(tokens, replay_file), EP, str(out))
    return launch(config, fault=KillRank(rank=1, after_step=2)), out


def final_shards(out: Path, step: int, world_size: int) -> list[dict[str, torch.Tensor]]:
    step_dir = out / "checkpoints" / f"step-{step:08d}"
    assert (step_dir / "COMPLETE").exists()
    paths = sorted(step_dir.glob("rank-*.pt"))
    assert [p.name for p in paths] == [f"rank-{r:05d}.pt" for r in range(world_size)]
    return [torch.load(p, weights_only=True)["model"] for p in paths]


def assert_shards_match(shards: list[dict[str, torch.Tensor]], single: dict) -> None:
    merged: dict[str, torch.Tensor] = {}
    for rank, shard in enumerate(shards):
        for name, tensor in shard.items():
            assert name in single, (rank, name)
            assert tensor.shape == single[name].shape, (rank, name)
            # every copy, not only one: the last stage's embedding is the first stage's too
            diff = (tensor - single[name]).abs().max().item()
            assert diff < 1e-5, (rank, name, diff)
            merged[name] = tensor
    assert set(merged) == set(single)


def by_rank_and_step(steps: list[RankStep]) -> dict[tuple[int, int], list[RankStep]]:
    found: dict[tuple[int, int], list[RankStep]] = defaultdict(list)
    for s in steps:
        found[(s.rank, s.step)].append(s)
    return found


# -- the parallel layouts train what one process trains ------------------------------------


@pytest.mark.parametrize("layout", [EP, PP, DP], ids=lambda layout: layout.name)
def test_a_parallel_job_trains_what_one_process_trains(layout, run, single):
    result, out = run(layout)
    single_losses, single_state = single
    assert result.completed and result.attempts == 1 and not result.recoveries
    assert result.stopped == ""
    reported = sorted((s.rank, s.step) for s in result.steps)
    assert reported == [(r, t) for r in range(layout.world_size) for t in range(STEPS)]
    for s in result.steps:
        assert s.loss == pytest.approx(single_losses[s.step], rel=1e-5), (s.rank, s.step)
        assert s.attempt == 0 and not [e for e in s.events if e["kind"] == "replay"]
        assert s.all_reduce_bytes > 0  # every layout here has weights held twice
        if layout.ep == 1:
            assert s.all_to_all_bytes == 0 and s.all_to_all_s == 0
        if layout.pp == 1:
            assert s.pipeline_bytes == 0 and s.pipeline_s == 0
    for step in range(STEPS):  # the step's micro-batches, each trained once
        mine = [s for s in result.steps if s.step == step]
        last = [s for s in mine if s.stage == layout.pp - 1]
        trained = sorted(sample for s in last for sample in s.samples)
        assert trained == list(range(step * MICROBATCHES, (step + 1) * MICROBATCHES))
        assert sum(s.tokens for s in last) == MICROBATCHES * MICRO_BATCH_SIZE * SEQ_LEN
    assert_shards_match(final_shards(out, STEPS, layout.world_size), single_state)
    # checkpoints every 2 steps, the two newest kept
    kept = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert kept == ["step-00000002", "step-00000004"]


def test_the_losses_change_from_step_to_step(single):
    """The comparisons above mean something only if training moves the loss."""
    losses, _ = single
    assert len(set(losses)) == STEPS


# -- what the collectives report -----------------------------------------------------------


def test_all_to_all_volumes_are_the_realized_expert_loads(run):
    result, _ = run(EP)
    row_bytes = MODEL.hidden_size * 4  # float32 rows of hidden states
    unbalanced = False
    for step in range(STEPS):
        ranks = sorted((s for s in result.steps if s.step == step), key=lambda s: s.rank)
        assert [s.rank for s in ranks] == [0, 1]
        for s in ranks:
            assert s.layers == list(range(MODEL.num_layers))
        for i in range(MODEL.num_layers):
            received = [s.received_tokens[i] for s in ranks]
            dispatched = [s.dispatched_tokens[i] for s in ranks]
            assert sum(received) == sum(dispatched) == STEP_SLOTS, (step, i)
            for s in ranks:  # a rank sends every slot of its own micro-batches
                assert s.dispatched_tokens[i] == sum(s.tokens_per_expert[i]) == STEP_SLOTS // 2
                local = local_experts(EP, EP.coords(s.rank).ep_index, MODEL.num_experts)
                from_all = [sum(q.tokens_per_expert[i][e] for q in ranks) for e in local]
                assert s.tokens_per_local_expert[i] == from_all, (step, s.rank, i)
                assert s.received_tokens[i] == sum(from_all) == sum(s.tokens_per_local_expert[i])
                unbalanced |= s.received_tokens[i] != s.dispatched_tokens[i]
        for s in ranks:
            # each main layer's slots crossing to the other rank, there and back, forward
            # and backward (the MTP module's layer moves more on top)
            crossing = 0
            for i in range(MODEL.num_layers):
                local = local_experts(EP, EP.coords(s.rank).ep_index, MODEL.num_experts)
                sent_away = s.dispatched_tokens[i] - sum(s.tokens_per_expert[i][e] for e in local)
                kept_home = s.dispatched_tokens[i] - sent_away
                crossing += sent_away + (s.received_tokens[i] - kept_home)
            assert s.all_to_all_bytes >= 2 * crossing * row_bytes > 0
            assert s.all_to_all_s > 0 and s.all_reduce_bytes > 0
            assert s.pipeline_bytes == 0
            assert s.pipeline_s == 0  # no stages, no pipeline time
    assert unbalanced, "the routing was perfectly even: the loads above prove nothing"


def test_pipeline_sends_activations_and_gradients_and_no_tokens(run):
    result, _ = run(PP)
    activation_bytes = MICRO_BATCH_SIZE * SEQ_LEN * MODEL.hidden_size * 4
    for s in result.steps:
        assert s.layers == [s.stage]  # one main layer per stage
        # forward activations down, gradients up: one of MICROBATCHES micro-batches each
        assert s.pipeline_bytes == MICROBATCHES * activation_bytes
        assert s.pipeline_s > 0
        assert s.all_to_all_s == 0 and s.all_to_all_bytes == 0
        assert s.dispatched_tokens == s.received_tokens == [0]
        assert sum(s.tokens_per_expert[0]) == STEP_SLOTS  # all micro-batches route here


# -- the fault drill: a rank killed, the job restarted from the sharded checkpoint ---------


def test_a_killed_rank_restarts_the_job_from_the_newest_complete_checkpoint(drill):
    result, _ = drill
    assert result.completed and result.attempts == 2 and result.stopped == ""
    [recovery] = result.recoveries
    assert recovery.cause == "killed" and recovery.rank == 1 and recovery.attempt == 0
    assert "SIGKILL" in recovery.message
    assert recovery.restored_step is not None
    assert recovery.restored_step % 2 == 0 and 2 <= recovery.restored_step <= 4
    assert recovery.steps_replayed >= 1
    assert recovery.detect_s >= 0
    assert recovery.resume_s is not None and recovery.resume_s > 0
    restored = [e for e in result.events if e.kind == "restored"]
    assert sorted((e.rank, e.attempt, e.step) for e in restored) == [
        (0, 1, recovery.restored_step),
        (1, 1, recovery.restored_step),
    ]


def test_replayed_steps_are_bit_equal_to_the_originals(drill):
    result, _ = drill
    [recovery] = result.recoveries
    assert recovery.restored_step is not None
    replayed_steps = list(
        range(recovery.restored_step, recovery.restored_step + recovery.steps_replayed)
    )
    found = by_rank_and_step(result.steps)
    for rank in (0, 1):
        twice = sorted(
            step for (r, step), records in found.items() if r == rank and len(records) == 2
        )
        assert twice == replayed_steps, rank
    for (rank, step), records in found.items():
        assert len(records) <= 2, (rank, step)
        if len(records) == 2:
            first, again = sorted(records, key=lambda s: s.attempt)
            assert (first.attempt, again.attempt) == (0, 1)
            assert again.loss == first.loss, (rank, step)  # the same bits
            assert again.samples == first.samples
            assert again.tokens_per_expert == first.tokens_per_expert
            assert not any(e["kind"] == "replay" for e in first.events), (rank, step)
            assert any(e["kind"] == "replay" for e in again.events), (rank, step)
        else:
            [only] = records
            assert not any(e["kind"] == "replay" for e in only.events), (rank, step)


def test_a_job_that_lost_a_rank_ends_where_an_unbroken_one_does(drill, single_skewed):
    result, out = drill
    losses, state = single_skewed
    found = by_rank_and_step(result.steps)
    assert sorted(found) == [(r, t) for r in (0, 1) for t in range(FAULT_STEPS)]
    for (rank, step), records in found.items():
        last = max(records, key=lambda s: s.attempt)
        assert last.loss == pytest.approx(losses[step], rel=1e-5), (rank, step)
    assert_shards_match(final_shards(out, FAULT_STEPS, EP.world_size), state)


# -- an OOM restarts the job, skipping the step that ran out of memory ----------------------


def test_an_oom_restarts_the_job_and_skips_the_failed_steps_samples(
    drill, tmp_path_factory, tokens, replay_file
):
    drill_result, _ = drill
    peaks = {(s.rank, s.step): s.peak_memory_bytes for s in drill_result.steps}
    spike = peaks[(0, SPIKE_STEP)]
    calm = max(peak for key, peak in peaks.items() if key != (0, SPIKE_STEP))
    assert spike > calm * 1.005  # the spike is what the budget tells apart
    budget = (spike + calm) // 2

    out = tmp_path_factory.mktemp("oom")
    config = DistConfig(fault_config(tokens, replay_file, budget_bytes=budget), EP, str(out))
    result = launch(config)

    assert result.completed and result.attempts == 2 and result.stopped == ""
    [recovery] = result.recoveries
    assert recovery.cause == "oom" and recovery.rank == 0 and recovery.attempt == 0
    assert recovery.step == SPIKE_STEP and "out of memory" in recovery.message
    assert recovery.restored_step == 2 and recovery.steps_replayed == 1
    assert recovery.resume_s is not None and recovery.resume_s > 0
    [oom] = [e for e in result.events if e.kind == "oom"]
    failed = list(range(SPIKE_STEP * MICROBATCHES, (SPIKE_STEP + 1) * MICROBATCHES))
    assert (oom.rank, oom.attempt, oom.step, oom.detail["samples"]) == (0, 0, SPIKE_STEP, failed)

    # The failed step's samples never trained; the step after the OOM takes the next ones.
    assert not [s for s in result.steps if set(s.samples) & set(failed)]
    found = by_rank_and_step(result.steps)
    assert sorted(found) == [(r, t) for r in (0, 1) for t in range(FAULT_STEPS)]
    redone = sorted(x for r in (0, 1) for x in found[(r, SPIKE_STEP)][-1].samples)
    assert redone == [x + MICROBATCHES for x in failed]
    # The steps before the OOM match the unbudgeted drill bit for bit, the replay included.
    drill_found = by_rank_and_step(drill_result.steps)
    for rank in (0, 1):
        for step in range(SPIKE_STEP):
            for s in found[(rank, step)]:
                assert s.loss == drill_found[(rank, step)][0].loss, (rank, step, s.attempt)
    assert max(s.peak_memory_bytes for s in result.steps) <= budget


def test_a_rank_that_refuses_its_config_ends_the_job_with_its_message(tokens, tmp_path):
    # 1 MB holds no rank's weights: every rank exits with code 2 and says why; no restart.
    cfg = trainer_config(tokens, budget_bytes=1_000_000)
    with pytest.raises(LaunchConfigError, match="is smaller than rank"):
        launch(DistConfig(cfg, EP, str(tmp_path)), max_restarts=5)
    assert len(list((tmp_path / "logs").glob("attempt-*"))) == 2  # one attempt, two ranks


def test_a_rank_that_crashes_ends_the_job_with_its_log(tokens, tmp_path):
    broken = tmp_path / "tokens.pt"
    broken.write_text("not a tensor")
    cfg = trainer_config(tokens, token_stream_path=str(broken))
    with pytest.raises(LaunchError, match="failed: exit code 1") as caught:
        launch(DistConfig(cfg, EP, str(tmp_path / "out")), max_restarts=5)
    assert not isinstance(caught.value, LaunchConfigError)
    assert "Traceback" in str(caught.value)  # the rank's own log, for the user to read
