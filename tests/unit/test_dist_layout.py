"""How a distributed training job's ranks split the work (expert, pipeline, data parallel),
and its sharded checkpoints (complete only once every rank's shard is on disk)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from moeperf.targets.training.checkpoint import TrainState
from moeperf.targets.training.distributed.layout import (
    Layout,
    LayoutError,
    local_experts,
    stage_layers,
)
from moeperf.targets.training.distributed.shards import COMPLETE, ShardedCheckpoints

# Layout(ep=2, pp=2, dp=2), rank = (stage * dp + dp_index) * ep + ep_index, by hand:
#   rank: 0 1 2 3 4 5 6 7
#  stage: 0 0 0 0 1 1 1 1
#     dp: 0 0 1 1 0 0 1 1
#     ep: 0 1 0 1 0 1 0 1
FULL = Layout(ep=2, pp=2, dp=2)
BY_HAND = {
    0: (0, 0, 0), 1: (0, 0, 1), 2: (0, 1, 0), 3: (0, 1, 1),
    4: (1, 0, 0), 5: (1, 0, 1), 6: (1, 1, 0), 7: (1, 1, 1),
}  # fmt: skip


def test_sizes_and_name():
    assert (FULL.world_size, FULL.data_width, FULL.name) == (8, 4, "ep2-pp2-dp2")
    assert Layout(ep=4, dp=2).world_size == 8 and Layout(ep=4, dp=2).data_width == 8
    assert Layout(pp=4).data_width == 1
    assert Layout(ep=2, dp=3).name == "ep2-dp3"
    assert Layout().name == "single" and Layout().world_size == 1


@pytest.mark.parametrize("layout", [FULL, Layout(ep=4), Layout(pp=3, dp=2), Layout(ep=2, pp=3)])
def test_coords_and_rank_of_round_trip(layout):
    seen = set()
    for rank in range(layout.world_size):
        c = layout.coords(rank)
        assert c.rank == rank
        assert 0 <= c.stage < layout.pp and 0 <= c.dp_index < layout.dp
        assert 0 <= c.ep_index < layout.ep
        assert layout.rank_of(c.stage, c.dp_index, c.ep_index) == rank
        seen.add((c.stage, c.dp_index, c.ep_index))
    assert len(seen) == layout.world_size  # every coordinate once


def test_coords_follow_the_documented_formula():
    for rank, (stage, dp_index, ep_index) in BY_HAND.items():
        c = FULL.coords(rank)
        assert (c.stage, c.dp_index, c.ep_index) == (stage, dp_index, ep_index), rank
        assert FULL.rank_of(stage, dp_index, ep_index) == rank


def test_ranks_outside_the_world_are_refused():
    with pytest.raises(LayoutError, match="rank 8 is outside world size 8"):
        FULL.coords(8)
    with pytest.raises(LayoutError, match="rank -1"):
        FULL.coords(-1)


def test_data_index_numbers_a_stages_streams_once_each():
    for stage in range(FULL.pp):
        ranks = [r for r, (s, _, _) in BY_HAND.items() if s == stage]
        assert sorted(FULL.coords(r).data_index(FULL) for r in ranks) == [0, 1, 2, 3]
    # dp_index * ep + ep_index
    assert FULL.coords(6).data_index(FULL) == 2 and FULL.coords(3).data_index(FULL) == 3


def test_expert_group_is_the_same_stage_and_replica():
    assert FULL.expert_group(0) == [0, 1]
    assert FULL.expert_group(3) == [2, 3]
    assert FULL.expert_group(5) == [4, 5]
    assert FULL.expert_group(6) == [6, 7]
    assert Layout(ep=4, dp=2).expert_group(6) == [4, 5, 6, 7]


def test_dense_group_is_the_whole_stage():
    assert FULL.dense_group(1) == [0, 1, 2, 3]
    assert FULL.dense_group(6) == [4, 5, 6, 7]
    assert Layout(pp=2, dp=2).dense_group(3) == [2, 3]


def test_expert_data_group_is_the_stage_ranks_holding_the_same_experts():
    assert FULL.expert_data_group(0) == [0, 2]
    assert FULL.expert_data_group(3) == [1, 3]
    assert FULL.expert_data_group(4) == [4, 6]
    assert FULL.expert_data_group(7) == [5, 7]
    assert Layout(ep=2).expert_data_group(1) == [1]  # no replica: nothing to sum over


def test_embedding_group_ties_the_first_and_last_stage():
    assert FULL.embedding_group(1) == [1, 5]
    assert FULL.embedding_group(5) == [1, 5]
    assert FULL.embedding_group(6) == [2, 6]
    three = Layout(ep=2, pp=3)  # rank = stage * 2 + ep_index
    assert three.embedding_group(0) == [0, 4]
    assert three.embedding_group(5) == [1, 5]
    assert three.embedding_group(3) == [3]  # a middle stage holds no embedding
    assert Layout(ep=2).embedding_group(1) == [1]  # one stage: nothing to tie


def test_all_groups_lists_each_group_once_in_a_fixed_order():
    expected = [
        [0, 1], [2, 3], [4, 5], [6, 7],  # expert groups
        [0, 1, 2, 3], [4, 5, 6, 7],  # dense groups
        [0, 2], [1, 3], [4, 6], [5, 7],  # expert-data groups
        [0, 4], [1, 5], [2, 6], [3, 7],  # embedding groups
    ]  # fmt: skip
    groups = FULL.all_groups()
    assert groups == expected
    assert FULL.all_groups() == groups  # every rank computes the same list


@pytest.mark.parametrize(
    "layout", [FULL, Layout(ep=2), Layout(pp=2), Layout(dp=2), Layout(ep=2, pp=3), Layout()]
)
def test_all_groups_has_no_duplicates_or_singletons(layout):
    groups = layout.all_groups()
    assert all(len(g) > 1 for g in groups)
    assert len({tuple(g) for g in groups}) == len(groups)
    for rank in range(layout.world_size):  # and every group a rank uses is in it
        for group in (
            layout.expert_group(rank),
            layout.dense_group(rank),
            layout.expert_data_group(rank),
            layout.embedding_group(rank),
        ):
            assert len(group) == 1 or group in groups


def test_all_groups_of_expert_parallel_alone_is_one_group():
    # expert and dense groups coincide; expert-data and embedding groups are singletons
    assert Layout(ep=2).all_groups() == [[0, 1]]
    assert Layout().all_groups() == []


def test_check_accepts_a_layout_that_fits():
    FULL.check(num_experts=4, num_layers=2, microbatches=8)
    Layout(ep=4, pp=2).check(num_experts=8, num_layers=4, microbatches=4)


def test_check_names_each_problem():
    with pytest.raises(LayoutError, match=r"ep \(3\) must divide the model's 4 experts") as err:
        Layout(ep=3).check(num_experts=4, num_layers=2, microbatches=6)
    assert "pp" not in str(err.value) and "microbatches" not in str(err.value)
    with pytest.raises(LayoutError, match=r"pp \(3\) must divide the model's 2 layers") as err:
        Layout(pp=3).check(num_experts=4, num_layers=2, microbatches=4)
    assert "experts" not in str(err.value)
    with pytest.raises(
        LayoutError, match=r"microbatches \(6\) must be a multiple of ep x dp \(4\)"
    ):
        Layout(ep=2, dp=2).check(num_experts=4, num_layers=2, microbatches=6)
    with pytest.raises(LayoutError, match=r"dp must be >= 1"):
        Layout(dp=0).check(num_experts=4, num_layers=2, microbatches=4)


def test_check_reports_every_problem_at_once():
    with pytest.raises(LayoutError) as err:
        Layout(ep=3, pp=3).check(num_experts=4, num_layers=2, microbatches=4)
    message = str(err.value)
    assert "ep (3)" in message and "pp (3)" in message and "microbatches (4)" in message


def test_local_experts_split_the_experts_in_rank_order():
    layout = Layout(ep=2)
    assert local_experts(layout, 0, 4) == range(0, 2)
    assert local_experts(layout, 1, 4) == range(2, 4)
    four = Layout(ep=4, dp=2)
    assert local_experts(four, 3, 8) == range(6, 8)
    covered = [e for i in range(four.ep) for e in local_experts(four, i, 8)]
    assert covered == list(range(8))  # every expert on exactly one rank of a group
    assert local_experts(Layout(), 0, 4) == range(0, 4)


def test_stage_layers_split_the_layers_in_stage_order():
    assert stage_layers(Layout(pp=2), 0, 4) == range(0, 2)
    assert stage_layers(Layout(pp=2), 1, 4) == range(2, 4)
    assert stage_layers(Layout(pp=3), 2, 6) == range(4, 6)
    assert stage_layers(Layout(ep=2), 0, 4) == range(0, 4)


# -- sharded checkpoints -------------------------------------------------------------------


def _model_and_optimizer(seed: int) -> tuple[nn.Linear, torch.optim.AdamW]:
    torch.manual_seed(seed)
    model = nn.Linear(6, 3)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


def _train_one_step(model: nn.Linear, optimizer: torch.optim.Optimizer, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(5, 6, generator=generator)
    optimizer.zero_grad()
    model(x).pow(2).sum().backward()
    optimizer.step()


def _write_step(directory, step: int, world_size: int, skip_rank: int | None = None) -> None:
    for rank in range(world_size):
        if rank == skip_rank:
            continue
        model, optimizer = _model_and_optimizer(rank)
        ShardedCheckpoints(directory, rank).write_shard(model, optimizer, TrainState(step, step))


def test_a_step_counts_only_once_marked_complete(tmp_path):
    _write_step(tmp_path, 2, world_size=2)
    _write_step(tmp_path, 4, world_size=2)
    store = ShardedCheckpoints(tmp_path, rank=0)
    store.mark_complete(2, world_size=2)
    # step 4's shards are all there, but nobody has marked it: a restart uses step 2
    assert (tmp_path / "step-00000004" / "rank-00001.pt").exists()
    assert store.complete_steps() == [2] and store.latest() == 2
    store.mark_complete(4, world_size=2)
    assert store.latest() == 4
    assert (tmp_path / "step-00000004" / COMPLETE).read_text().strip() == "2"
    assert not list(tmp_path.rglob("*.tmp"))  # written to a temporary name, then renamed


def test_nothing_complete_means_no_latest_and_no_restore(tmp_path):
    _write_step(tmp_path, 2, world_size=2)
    store = ShardedCheckpoints(tmp_path, rank=1)
    assert store.latest() is None
    model, optimizer = _model_and_optimizer(0)
    with pytest.raises(FileNotFoundError, match="no complete checkpoint"):
        store.restore(model, optimizer)


def test_mark_complete_refuses_a_step_with_a_shard_missing(tmp_path):
    _write_step(tmp_path, 2, world_size=3, skip_rank=1)
    store = ShardedCheckpoints(tmp_path, rank=0)
    with pytest.raises(RuntimeError, match="2 shards written, 3 ranks"):
        store.mark_complete(2, world_size=3)
    assert not (tmp_path / "step-00000002" / COMPLETE).exists()
    assert store.latest() is None


def test_keep_prunes_all_but_the_newest_complete_steps(tmp_path):
    store = ShardedCheckpoints(tmp_path, rank=0, keep=2)
    for step in (2, 4, 6):
        _write_step(tmp_path, step, world_size=2)
        store.mark_complete(step, world_size=2)
    _write_step(tmp_path, 8, world_size=2)  # written, never marked: left alone
    assert store.complete_steps() == [4, 6]
    assert not (tmp_path / "step-00000002").exists()
    assert (tmp_path / "step-00000004" / "rank-00000.pt").exists()
    assert (tmp_path / "step-00000008" / "rank-00001.pt").exists()
    assert store.latest() == 6


def test_restore_gives_back_this_ranks_shard_bit_for_bit(tmp_path):
    saved = {}
    for rank in (0, 1):
        model, optimizer = _model_and_optimizer(seed=10 + rank)
        for i in range(3):  # optimizer state that is not the initial one
            _train_one_step(model, optimizer, seed=i)
        ShardedCheckpoints(tmp_path, rank).write_shard(model, optimizer, TrainState(6, 25))
        saved[rank] = (model, optimizer)
    ShardedCheckpoints(tmp_path, 0).mark_complete(6, world_size=2)

    fresh, fresh_optimizer = _model_and_optimizer(seed=99)
    _train_one_step(fresh, fresh_optimizer, seed=7)  # stale state the restore must replace
    state, seconds = ShardedCheckpoints(tmp_path, rank=1).restore(fresh, fresh_optimizer)
    assert state == TrainState(step=6, next_sample=25) and seconds >= 0

    model, optimizer = saved[1]
    for name, tensor in model.state_dict().items():
        assert torch.equal(fresh.state_dict()[name], tensor), name
    other = saved[0][0]
    assert not torch.equal(fresh.weight, other.weight)  # rank 1's shard, not rank 0's
    for p, q in zip(model.parameters(), fresh.parameters(), strict=True):
        mine, theirs = optimizer.state[p], fresh_optimizer.state[q]
        assert set(mine) == set(theirs)
        for key in mine:
            assert torch.equal(mine[key], theirs[key]), key
    # and the two continue identically: moments and step counts came back too
    _train_one_step(model, optimizer, seed=3)
    _train_one_step(fresh, fresh_optimizer, seed=3)
    for p, q in zip(model.parameters(), fresh.parameters(), strict=True):
        assert torch.equal(p, q)
