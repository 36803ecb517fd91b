"""MTP draft verification (targets/serving/engine/sampler.py): greedy drafts accepted while
they equal the argmax; sampled drafts by rejection sampling, whose committed tokens are
distributed exactly as the main model's p whatever the drafter's q, and accepted with
probability sum min(p, q). The statistical checks are chi-square goodness-of-fit tests at
a level far below anything a correct sampler fails by chance (1e-4), each beside the same
test of a broken verifier, which it rejects."""

import math

import numpy as np
import pytest
import torch
from scipy import stats

from moeperf.targets.serving.engine.api import SamplingParams
from moeperf.targets.serving.engine.sampler import Drafts, sampling_probs, verify

SAMPLED = SamplingParams(temperature=1.0)
TRIALS = 20_000
ALPHA = 1e-4

# A 6-token vocabulary: the main model's p and a drafter's q that disagree noticeably.
P = torch.tensor([0.40, 0.25, 0.15, 0.10, 0.07, 0.03])
Q = torch.tensor([0.10, 0.40, 0.05, 0.25, 0.15, 0.05])


def logits_of(probs: torch.Tensor) -> torch.Tensor:
    return probs.log()


def first_tokens(accept_all: bool = False) -> tuple[np.ndarray, int]:
    """The first committed token of TRIALS one-draft steps, drafts drawn from Q."""
    generator = torch.Generator().manual_seed(0)
    drafts = torch.multinomial(Q, TRIALS, replacement=True, generator=generator).tolist()
    logits = logits_of(torch.stack([P, P]))  # after the last token, and after the draft
    q = Q[None]  # one view for every call: the loop's cost is per-call overhead
    counts = np.zeros(len(P))
    accepted_total = 0
    for draft in drafts:
        tokens, accepted = verify(
            logits, Drafts([draft], q), SAMPLED, generator, accept_all=accept_all
        )
        counts[tokens[0]] += 1
        accepted_total += accepted
    return counts, accepted_total


def test_sampled_verification_keeps_the_main_models_distribution():
    counts, accepted = first_tokens()
    fit = stats.chisquare(counts, TRIALS * P.numpy())
    assert fit.pvalue > ALPHA, (counts / TRIALS, fit)
    # Acceptance is sum min(p, q) (0.55 here), within 4 standard errors.
    expected = float(torch.minimum(P, Q).sum())
    assert abs(accepted / TRIALS - expected) < 4 * math.sqrt(expected * (1 - expected) / TRIALS)


def test_the_same_test_rejects_a_verifier_that_accepts_every_draft():
    counts, accepted = first_tokens(accept_all=True)
    assert accepted == TRIALS
    assert stats.chisquare(counts, TRIALS * P.numpy()).pvalue < ALPHA  # it gave Q, not P


def test_every_draft_accepted_commits_them_and_a_bonus_from_p():
    # p puts all mass on token 2 at each position: drafts of 2 are always accepted.
    certain = torch.full((3, 4), -30.0)
    certain[:, 2] = 0.0
    q = torch.tensor([[0.25, 0.25, 0.25, 0.25]] * 2)
    tokens, accepted = verify(certain, Drafts([2, 2], q), SAMPLED, torch.Generator())
    assert (tokens, accepted) == ([2, 2, 2], 2)
    # A draft p gives no mass is always rejected, and the correction comes from p - q.
    tokens, accepted = verify(certain, Drafts([0, 2], q), SAMPLED, torch.Generator())
    assert (tokens, accepted) == ([2], 0)


def test_greedy_drafts_are_accepted_while_they_equal_the_argmax():
    logits = torch.tensor([[0.0, 5.0, 0.0], [0.0, 0.0, 5.0], [5.0, 0.0, 0.0]])
    greedy = SamplingParams(temperature=0.0)
    assert verify(logits, Drafts([1, 2]), greedy, torch.Generator()) == ([1, 2, 0], 2)
    assert verify(logits, Drafts([1, 0]), greedy, torch.Generator()) == ([1, 2], 1)
    assert verify(logits, Drafts([2, 2]), greedy, torch.Generator()) == ([1], 0)
    broken = verify(logits, Drafts([2, 2]), greedy, torch.Generator(), accept_all=True)
    assert broken == ([2, 2, 0], 2)


def test_sampled_drafts_need_their_distributions():
    with pytest.raises(ValueError, match="distributions"):
        verify(torch.zeros((2, 4)), Drafts([1]), SAMPLED, torch.Generator())


def test_top_p_is_applied_and_renormalized():
    probs = sampling_probs(logits_of(P)[None], SamplingParams(temperature=1.0, top_p=0.6))[0]
    assert probs.tolist() == pytest.approx([0.40 / 0.65, 0.25 / 0.65, 0, 0, 0, 0], abs=1e-6)
