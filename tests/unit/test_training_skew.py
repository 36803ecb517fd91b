"""Routing skew profiles (targets.training.skew) and the router-bias fit (skew_fit)."""

import itertools
import math
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from moeperf.targets.model.config import MoEConfig
from moeperf.targets.model.model import MoETransformer
from moeperf.targets.training.skew import (
    CALM_MEDIAN_EXCESS,
    CALM_SIGMA,
    LONG_RUN_IMBALANCE_LIMIT,
    PROFILE_NAMES,
    SPIKE_PROBABILITY,
    SPIKE_RATIO,
    CalmProfile,
    ReplayProfile,
    RoutingShape,
    SkewProfileError,
    SpikyProfile,
    hot_expert_fraction,
    load_imbalance,
    profile_by_name,
    replay_line,
)
from moeperf.targets.training.skew_fit import fit_router_bias, install, routed_counts, target_counts

REPLAY_EXAMPLE = Path(__file__).resolve().parents[1] / "data" / "routing_replay_example.jsonl"
SHAPE = RoutingShape(num_layers=4, num_experts=8, top_k=2)


def tiny_model(num_layers: int) -> MoETransformer:
    torch.manual_seed(0)
    cfg = MoEConfig(
        vocab_size=128,
        hidden_size=32,
        expert_hidden_size=16,
        num_layers=num_layers,
        num_heads=2,
        num_kv_heads=1,
        num_experts=8,
        top_k=2,
        max_position=64,
        mtp_depth=0,
    )
    return MoETransformer(cfg).eval()


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """Tiny ops run faster on one thread than two contending ones."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def realized_run(model, profile, microbatches, batch=2, seq_len=32):
    """Forward ``microbatches`` random batches under ``profile``: per micro-batch the target
    and the realized tokens_per_expert ``[L, E]``."""
    handle = install(model, profile)
    gen = torch.Generator().manual_seed(1)
    targets, realized = [], []
    with torch.no_grad():
        for m in microbatches:
            handle.set_microbatch(m)
            idx = torch.randint(0, model.config.vocab_size, (batch, seq_len), generator=gen)
            realized.append(model(idx).tokens_per_expert)
            targets.append(handle.target())
    handle.remove()
    return targets, torch.stack(realized)


def binomial_interval(n: int, p: float, confidence: float = 0.999) -> tuple[int, int]:
    """Smallest [lo, hi] with at most (1 - confidence) / 2 probability below and above."""
    tail = (1 - confidence) / 2
    log_pmf = [
        math.lgamma(n + 1)
        - math.lgamma(k + 1)
        - math.lgamma(n - k + 1)
        + k * math.log(p)
        + (n - k) * math.log1p(-p)
        for k in range(n + 1)
    ]
    pmf = [math.exp(x) for x in log_pmf]
    below = list(itertools.accumulate(pmf))  # P(X <= k)
    above = list(itertools.accumulate(reversed(pmf)))[::-1]  # P(X >= k)
    lo = next(k for k in range(n + 1) if below[k] > tail)
    hi = next(k for k in range(n, -1, -1) if above[k] > tail)
    return lo, hi


# -- profiles: targets ---------------------------------------------------------------------


@pytest.mark.parametrize("profile_cls", [CalmProfile, SpikyProfile])
def test_target_is_a_pure_function_of_seed_and_microbatch(profile_cls):
    first = [profile_cls(seed=7).target(m, SHAPE) for m in range(50)]
    again = [profile_cls(seed=7).target(m, SHAPE) for m in reversed(range(50))][::-1]
    for a, b in zip(first, again, strict=True):
        assert torch.equal(a.load_fraction, b.load_fraction) and a.spike == b.spike
        assert a.load_fraction.shape == (4, 8)
        assert torch.allclose(a.load_fraction.sum(dim=-1), torch.ones(4, dtype=torch.float64))
    other_seed = profile_cls(seed=8).target(0, SHAPE)
    assert not torch.equal(first[0].load_fraction, other_seed.load_fraction)
    assert not torch.equal(first[0].load_fraction, first[1].load_fraction)


def test_calm_long_run_target_is_the_documented_log_normal():
    ratios = torch.stack(
        [load_imbalance(CalmProfile(0).target(m, SHAPE).load_fraction) for m in range(5000)]
    )
    expected_mean = 1 + CALM_MEDIAN_EXCESS * math.exp(CALM_SIGMA**2 / 2)  # 1.113
    assert ratios.mean().item() == pytest.approx(expected_mean, abs=0.005)
    assert ratios.mean().item() < LONG_RUN_IMBALANCE_LIMIT
    assert ratios.median().item() == pytest.approx(1 + CALM_MEDIAN_EXCESS, abs=0.005)
    assert ratios.min().item() > 1.0
    assert ratios.max().item() < 2.0  # calm never looks like a spike


def test_spike_frequency_is_within_a_binomial_interval():
    n = 20_000
    spikes = sum(SpikyProfile(seed=0).is_spike(m) for m in range(n))
    lo, hi = binomial_interval(n, SPIKE_PROBABILITY)
    assert lo <= spikes <= hi, (spikes, lo, hi)


def test_spiky_is_calm_plus_spikes_of_the_same_hot_experts():
    calm, spiky = CalmProfile(seed=3), SpikyProfile(seed=3)
    spikes = 0
    for m in range(400):
        c, s = calm.target(m, SHAPE), spiky.target(m, SHAPE)
        if not s.spike:
            assert torch.equal(c.load_fraction, s.load_fraction)
            continue
        spikes += 1
        assert torch.allclose(
            load_imbalance(s.load_fraction), torch.full((4,), SPIKE_RATIO).double()
        )
        assert torch.equal(c.load_fraction.argmax(dim=-1), s.load_fraction.argmax(dim=-1))
    assert spikes > 0


def test_ratio_is_capped_at_what_top_k_allows():
    shape = RoutingShape(num_layers=2, num_experts=4, top_k=2)  # at most 2x: all pick one
    spike = next(
        SpikyProfile(0).target(m, shape) for m in range(1000) if SpikyProfile(0).is_spike(m)
    )
    assert torch.allclose(load_imbalance(spike.load_fraction), torch.full((2,), 2.0).double())


def test_load_imbalance_is_max_over_mean_per_layer():
    loads = torch.tensor([[4, 4, 4, 4], [8, 0, 4, 4], [0, 0, 0, 0]])
    ratios = load_imbalance(loads)
    assert ratios[:2].tolist() == [1.0, 2.0]
    assert math.isnan(ratios[2])
    assert load_imbalance(hot_expert_fraction(2.6, 5, 8)).item() == pytest.approx(2.6)


# -- the bias fit ---------------------------------------------------------------------------


def test_target_counts_sum_to_the_slots_and_respect_one_pick_per_token():
    counts = target_counts(hot_expert_fraction(2.6, 1, 8), num_tokens=33, top_k=2)
    assert counts.tolist() == [7, 22, 7, 6, 6, 6, 6, 6]  # 21.45, then 6.36 each: remainders
    capped = target_counts(torch.tensor([0.9, 0.05, 0.05]), num_tokens=10, top_k=2)
    assert capped.tolist()[0] == 10 and capped.sum().item() == 20


@pytest.mark.parametrize("num_tokens", [16, 300, 2048])
def test_fit_hits_targets_on_skewed_logits(num_tokens):
    gen = torch.Generator().manual_seed(num_tokens)
    logits = torch.randn(num_tokens, 8, generator=gen) + torch.linspace(-2, 2, 8)
    for fraction in (
        hot_expert_fraction(3.2, 0, 8),  # against the logits' own preference
        torch.tensor([0.5, 0.5, 0, 0, 0, 0, 0, 0]).double(),  # two experts take every token
        torch.tensor([0, 0.2, 0.2, 0.2, 0.2, 0.2, 0, 0]).double(),
    ):
        want = target_counts(fraction, num_tokens, top_k=2)
        bias = fit_router_bias(logits, want, top_k=2)
        assert (routed_counts(logits, bias, 2) - want).abs().max().item() <= 1
        assert bias.mean().abs().item() < 1e-5


def test_bias_is_a_pure_function_of_microbatch_layer_and_logits():
    """A layer recomputed in backward sees the same logits and must route the same."""
    handle = install(tiny_model(num_layers=4), SpikyProfile(seed=0))
    logits = torch.randn(64, 8)
    handle.set_microbatch(5)
    first = handle.bias(2, logits)
    handle.set_microbatch(6)
    with handle.at_microbatch(5):  # a pipeline recomputing micro-batch 5 while 6 is current
        assert torch.equal(handle.bias(2, logits.clone()), first)
    assert handle.microbatch == 6
    assert not torch.equal(handle.bias(2, logits), first)


def test_none_profile_leaves_the_model_bitwise_untouched():
    model = tiny_model(num_layers=2)
    idx = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        plain = model(idx)
        handle = install(model, profile_by_name("none", seed=0))
        skewless = model(idx)
    assert torch.equal(plain.logits, skewless.logits)
    assert torch.equal(plain.tokens_per_expert, skewless.tokens_per_expert)
    handle.remove()
    assert all(block.block_sparse_moe.router_bias is None for block in model.blocks)


# -- realized on a model ---------------------------------------------------------------------


@pytest.mark.slow
def test_calm_realized_long_run_imbalance_stays_under_1_2():
    targets, realized = realized_run(tiny_model(num_layers=2), CalmProfile(seed=0), range(300))
    ratios = load_imbalance(realized)  # [300, 2]
    assert ratios.mean().item() < LONG_RUN_IMBALANCE_LIMIT
    assert ratios.mean().item() == pytest.approx(1.11, abs=0.03)
    # Each micro-batch lands on its own target, to the token or so.
    want = torch.stack(
        [torch.stack([target_counts(row, 64, 2) for row in t.load_fraction]) for t in targets]
    )
    assert (realized - want).abs().max().item() <= 1


@pytest.mark.slow
def test_spiky_realized_spikes_at_the_seeds_frequency_and_magnitude():
    n = 1000
    targets, realized = realized_run(
        tiny_model(num_layers=1), SpikyProfile(seed=0), range(n), batch=1
    )
    ratios = load_imbalance(realized)[:, 0]  # [n]
    scheduled = torch.tensor([t.spike for t in targets])
    seen = ratios >= 2.0  # calm's 99.99th percentile is 1.64
    assert torch.equal(seen, scheduled)
    lo, hi = binomial_interval(n, SPIKE_PROBABILITY)
    assert lo <= int(seen.sum()) <= hi
    assert ratios[seen].mean().item() == pytest.approx(SPIKE_RATIO, rel=0.1)


def test_replay_reproduces_the_files_loads_and_loops():
    profile = profile_by_name("replay", seed=0, replay_path=REPLAY_EXAMPLE)
    assert isinstance(profile, ReplayProfile)
    lines = len(profile.tokens_per_expert)
    # The example was recorded with batches of 2 x 32 tokens: the same size replays exactly.
    _, realized = realized_run(tiny_model(num_layers=4), profile, range(lines + 2))
    recorded = torch.tensor(profile.tokens_per_expert)  # [lines, L, E]
    assert (realized[:lines] - recorded).abs().max().item() <= 2
    assert (realized[lines:] - recorded[:2]).abs().max().item() <= 2


def test_recorded_routing_replays(tmp_path):
    model = tiny_model(num_layers=2)
    _, realized = realized_run(model, SpikyProfile(seed=0), range(5))
    path = tmp_path / "recorded.jsonl"
    path.write_text("".join(replay_line(r, microbatch=m) + "\n" for m, r in enumerate(realized)))
    _, replayed = realized_run(model, ReplayProfile.load(path), range(5))
    assert (replayed - realized).abs().max().item() <= 2


# -- errors -----------------------------------------------------------------------------------


def test_unknown_profile_lists_the_valid_ones():
    with pytest.raises(SkewProfileError, match=r"'bursty'.*calm, spiky, replay") as err:
        profile_by_name("bursty", seed=0)
    assert all(name in str(err.value) for name in PROFILE_NAMES)


def test_replay_path_goes_with_the_replay_profile_only(tmp_path):
    with pytest.raises(SkewProfileError, match="needs a replay file"):
        profile_by_name("replay", seed=0)
    with pytest.raises(SkewProfileError, match="only read by profile 'replay'"):
        profile_by_name("calm", seed=0, replay_path=REPLAY_EXAMPLE)


def test_missing_replay_file_is_named(tmp_path):
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(SkewProfileError, match=rf"{re.escape(str(missing))}.*cannot read"):
        profile_by_name("replay", seed=0, replay_path=missing)


@pytest.mark.parametrize(
    ("second_line", "message"),
    [
        ("{not json", r"line 3: not JSON"),
        ('{"tokens": [[1, 2]]}', r'line 3: expected an object \{"tokens_per_expert"'),
        ('{"tokens_per_expert": [[1, -2]]}', r"line 3: expected an object"),
        ('{"tokens_per_expert": [[1, 2.5]]}', r"line 3: expected an object"),
        ('{"tokens_per_expert": []}', r"line 3: expected an object"),
    ],
)
def test_malformed_replay_line_is_named(tmp_path, second_line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(REPLAY_EXAMPLE.read_text().splitlines()[0] + "\n\n" + second_line + "\n")
    with pytest.raises(SkewProfileError, match=rf"{re.escape(str(path))}.*{message}"):
        ReplayProfile.load(path)


def test_empty_replay_file_is_an_error(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text("\n")
    with pytest.raises(SkewProfileError, match="no micro-batches"):
        ReplayProfile.load(path)


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        (RoutingShape(2, 8, 2), r"line 1: 4 layers; expected 2 layers of 8 token counts"),
        (RoutingShape(4, 16, 2), r"line 1: layer 0 has 8 experts; expected 4 layers of 16"),
        (RoutingShape(4, 8, 8), r"line 1: layer 0 gives one expert 25 of 128 .* top-8"),
    ],
)
def test_replay_shape_must_match_the_model(shape, message):
    profile = ReplayProfile.load(REPLAY_EXAMPLE)
    with pytest.raises(SkewProfileError, match=rf"{re.escape(str(REPLAY_EXAMPLE))}.*{message}"):
        profile.check(shape)


def test_install_checks_the_replay_against_the_model():
    with pytest.raises(SkewProfileError, match="4 layers; expected 2 layers"):
        install(tiny_model(num_layers=2), ReplayProfile.load(REPLAY_EXAMPLE))


def test_skew_profile_error_is_a_value_error():
    assert issubclass(SkewProfileError, ValueError)


def test_checkpointed_layers_recompute_their_own_routing_in_a_1f1b_order():
    """Backward of micro-batch 0 after micro-batch 1's forward (a 1F1B pipeline): the
    recomputed layers must route as micro-batch 0's forward did, not as micro-batch 1."""
    from torch.utils.checkpoint import checkpoint

    class RecomputeLayers:
        def __init__(self):
            self.routed = []

        def after_routing(self, layer, tokens_per_expert):
            self.routed.append((layer, tokens_per_expert.tolist()))

        def run(self, op, fn, *args):
            return checkpoint(fn, *args, use_reentrant=False) if op[0] == "layer" else fn(*args)

    model, runner = tiny_model(num_layers=2).train(), RecomputeLayers()
    model.set_runner(runner)
    handle = install(model, SpikyProfile(seed=0))
    gen = torch.Generator().manual_seed(0)
    losses = []
    for m in (0, 1):
        handle.set_microbatch(m)
        idx = torch.randint(0, 128, (2, 16), generator=gen)
        losses.append(model(idx, idx).loss)
    forward_routing = list(runner.routed)  # [mb 0 layer 0, mb 0 layer 1, mb 1 ...]
    for m in (0, 1):
        runner.routed.clear()
        losses[m].backward()  # recomputes the layers while micro-batch 1 is current
        assert sorted(runner.routed) == sorted(forward_routing[2 * m : 2 * m + 2])
    assert forward_routing[:2] != forward_routing[2:]


def test_a_repeated_batch_still_follows_each_microbatchs_own_target():
    """The same batch through the same weights (a forward-only benchmark): identical logits,
    yet every micro-batch routes to its own target, not a remembered one."""
    model, profile = tiny_model(num_layers=2), SpikyProfile(seed=0)
    handle = install(model, profile)
    idx = torch.randint(0, 128, (2, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        for m in range(6):
            handle.set_microbatch(m)
            realized = model(idx).tokens_per_expert
            want = torch.stack(
                [target_counts(row, 64, 2) for row in profile.target(m, SHAPE).load_fraction[:2]]
            )
            assert (realized - want).abs().max().item() <= 1


def test_profile_by_name_checks_against_a_model_config_when_given():
    cfg = tiny_model(num_layers=2).config
    assert profile_by_name("calm", seed=0, model=cfg) == CalmProfile(0)
    with pytest.raises(SkewProfileError, match="line 1: 4 layers; expected 2 layers"):
        profile_by_name("replay", seed=0, replay_path=REPLAY_EXAMPLE, model=cfg)
