"""The 1F1B order of forwards and backwards per pipeline stage."""

import pytest

from moeperf.targets.training.pipeline import max_in_flight, one_f_one_b


@pytest.mark.parametrize(
    ("stages", "stage", "microbatches", "alive"),
    [(4, 0, 8, 4), (4, 1, 8, 3), (4, 3, 8, 1), (4, 0, 2, 2), (1, 0, 4, 1)],
)
def test_stage_keeps_min_of_remaining_stages_and_microbatches_alive(
    stages, stage, microbatches, alive
):
    order = one_f_one_b(stages, stage, microbatches)
    assert max_in_flight(order) == alive == min(stages - stage, microbatches)
    forwards = [m for phase, m in order if phase == "forward"]
    backwards = [m for phase, m in order if phase == "backward"]
    assert forwards == backwards == list(range(microbatches))  # each once, in order
    # Warm-up forwards, then the first backward; never a backward before its forward.
    assert order[:alive] == [("forward", m) for m in range(alive)]
    assert order[alive] == ("backward", 0)
    assert all(order.index(("forward", m)) < order.index(("backward", m)) for m in forwards)


def test_bad_stage_is_refused():
    with pytest.raises(ValueError, match="stage must be in"):
        one_f_one_b(2, 2, 4)
