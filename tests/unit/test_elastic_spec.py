"""``[elastic]`` checked when its spec loads: events that cannot happen in their order, or
a target the drill cannot start replicas of, are an exit 2 naming what is wrong."""

from __future__ import annotations

import pytest

from moeperf.specs import load_spec
from moeperf.suites.errors import SpecError
from moeperf.suites.serving.spec import ServingSpec

LOAD = '[load]\nmode = "concurrency"\nlevels = [4]\nduration_s = 20.0\n'
REFERENCE = '[target]\nkind = "reference"\n'
URL = '[target]\nkind = "url"\nurl = "http://127.0.0.1:1"\n'


def spec_of(tmp_path, target: str, elastic: str, load: str = LOAD) -> str:
    path = tmp_path / "spec.toml"
    path.write_text(f'name = "t"\n{target}{load}[elastic]\n{elastic}')
    return str(path)


def events(*items: str) -> str:
    return "events = [" + ", ".join("{" + item + "}" for item in items) + "]\n"


@pytest.mark.parametrize(
    ("target", "elastic", "message"),
    [
        (REFERENCE, events('at_s = 2, action = "kill"'),
         r"events\[0\] \(kill at 2 s\): needs replica, one of 0-1"),
        (REFERENCE, events('at_s = 2, action = "scale_out", replica = 0'),
         r"scale_out starts a new replica \(numbered 2\): remove replica"),
        (REFERENCE, events('at_s = 2, action = "kill", replica = 0',
                           'at_s = 4, action = "scale_in", replica = 0'),
         r"events\[1\] \(scale_in at 4 s\): replica 0 is killed by then"),
        (REFERENCE, events('at_s = 2, action = "restart", replica = 1'),
         r"replica 1 is serving by then; restart one killed or scaled in"),
        (REFERENCE, events('at_s = 4, action = "kill", replica = 0',
                           'at_s = 2, action = "kill", replica = 1'),
         r"events\[1\] \(kill at 2 s\): give the events in time order"),
        (REFERENCE, "replicas = 1\n" + events('at_s = 2, action = "kill", replica = 0'),
         r"leaves no replica serving"),
        (REFERENCE, 'command = "vllm serve M --port {port}"\n'
                    + events('at_s = 2, action = "scale_out"'),
         r"remove elastic\.command \(it is for target\.kind = 'url'\)"),
        (URL, events('at_s = 2, action = "scale_out"'),
         r"starts each replica from elastic\.command, with \{port\} in it"),
        (REFERENCE, events('at_s = 25, action = "scale_out"'),
         r"the last elastic event \(scale_out at 25 s\) comes after the level's 20 s"),
    ],
)  # fmt: skip
def test_a_drill_it_cannot_run_is_refused_naming_why(tmp_path, target, elastic, message):
    with pytest.raises(SpecError, match=message):
        load_spec(spec_of(tmp_path, target, elastic))


def test_one_level_only(tmp_path):
    two = '[load]\nmode = "concurrency"\nlevels = [2, 4]\nduration_s = 20.0\n'
    with pytest.raises(SpecError, match=r"\[elastic\] changes its replicas during one load level"):
        load_spec(spec_of(tmp_path, REFERENCE, events('at_s = 2, action = "scale_out"'), two))


def test_the_shipped_spec_loads_with_its_four_events():
    spec = load_spec("elastic").spec
    assert isinstance(spec, ServingSpec) and spec.elastic is not None
    assert [e.action for e in spec.elastic.events] == ["scale_out", "scale_in", "kill", "restart"]
