from hypothesis import given
from hypothesis import strategies as st

from moeperf.collectors.scenario import Scenario


def test_names_say_the_mode_length_control_and_repeat():
    assert Scenario("concurrency", 4).name == "c=4"
    assert Scenario("poisson", 2.5).name == "rate=2.5"
    assert Scenario("gamma", 2).name == "rate=2"
    assert Scenario("trace", 1).name == "trace x1"
    assert Scenario("concurrency", 4, 512).name == "in=512 c=4"
    assert Scenario("concurrency", 4, 512, unique=True, repeat=2).name == "in=512 c=4 unique #2"


@given(
    st.sampled_from(["concurrency", "poisson", "gamma", "trace"]),
    st.integers(1, 512),
    st.one_of(st.none(), st.integers(1, 1 << 20)),
    st.booleans(),
    st.one_of(st.none(), st.integers(1, 9)),
)
def test_a_level_at_any_length_is_its_name_without_the_length(mode, level, length, unique, repeat):
    scenario = Scenario(mode, level, length, unique, repeat)
    bare = scenario.at_any_length()
    assert bare.input_tokens is None
    assert scenario.name == (bare.name if length is None else f"in={length} {bare.name}")
