"""``[deploy_sweep]`` checked when its spec loads: each way to get it wrong is an exit 2
naming the field and what is valid, before any arm starts."""

from __future__ import annotations

import pytest

from moeperf.specs import load_spec
from moeperf.suites.errors import SpecError
from moeperf.suites.serving.spec import ServingSpec

LOAD = '[load]\nmode = "concurrency"\nlevels = [1, 4]\nduration_s = 2.0\n'
URL = '[target]\nkind = "url"\nurl = "http://127.0.0.1:{port}"\n'
RUNNING = '[target]\nkind = "url"\nurl = "http://127.0.0.1:8001"\n'
REFERENCE = '[target]\nkind = "reference"\n'
COMMAND = 'command = "vllm serve M --port {port} --max-num-seqs {max_num_seqs}"\n'
NO_PORT = 'command = "vllm serve M --max-num-seqs {max_num_seqs}"\n'
TWO_URLS = 'urls = ["http://127.0.0.1:8001", "http://127.0.0.1:8002"]\n'


def spec_of(tmp_path, target: str, sweep: str) -> str:
    path = tmp_path / "spec.toml"
    path.write_text(f'name = "t"\n{target}{LOAD}[deploy_sweep]\nttft_p99_s = 1.0\n{sweep}')
    return str(path)


@pytest.mark.parametrize(
    ("target", "sweep", "message"),
    [
        (REFERENCE, "grid = { threads = [1] }\n" + COMMAND,
         r"on the reference target starts it .* remove deploy_sweep\.command"),
        (URL, "grid = { max_num_seqs = [8] }\n",
         r"a url target needs deploy_sweep\.command: .* or deploy_sweep\.urls"),
        (URL, "grid = { max_num_seqs = [8] }\n" + NO_PORT, r"it has no \{port\}"),
        (URL, 'grid = { max_num_seqs = [8], tp = [1] }\n' + COMMAND,
         r"the grid's tp appear in it nowhere"),
        (URL, "grid = { max_num_seqs = [8, 8] }\n" + COMMAND,
         r"deploy_sweep\.grid\.max_num_seqs lists a value twice"),
        (URL, 'grid = { max_num_seqs = [8] }\naccelerators = "tp"\n' + COMMAND,
         r"accelerators = 'tp' names no grid knob \(valid: a number, or one of max_num_seqs\)"),
        (RUNNING, "grid = { max_num_seqs = [8, 32] }\n" + TWO_URLS + COMMAND,
         r"give deploy_sweep\.command .* or deploy_sweep\.urls .* not both"),
        (RUNNING, "grid = { max_num_seqs = [8, 32, 64] }\n" + TWO_URLS,
         r"deploy_sweep\.urls needs one URL per arm of the grid \(3, in the grid's order\), "
         r"got 2"),
        (RUNNING, 'grid = { tp = [1, 2] }\nlinked = ["max_num_seqs"]\n' + TWO_URLS,
         r"deploy_sweep\.linked restarts each arm per level .* not deploy_sweep\.urls"),
        (RUNNING, 'grid = { tp = [1, 2] }\nurls = ["127.0.0.1:8001", "http://127.0.0.1:8002"]\n',
         r"deploy_sweep\.urls: '127\.0\.0\.1:8001' is not an http:// or https:// URL"),
    ],
)  # fmt: skip
def test_a_sweep_it_cannot_run_is_refused_naming_the_field(tmp_path, target, sweep, message):
    with pytest.raises(SpecError, match=message):
        load_spec(spec_of(tmp_path, target, sweep))


def test_running_servers_one_per_arm_load(tmp_path):
    spec = load_spec(spec_of(tmp_path, RUNNING, "grid = { max_num_seqs = [8, 32] }\n" + TWO_URLS))
    assert isinstance(spec.spec, ServingSpec) and spec.spec.deploy_sweep is not None
    assert spec.spec.deploy_sweep.urls == ["http://127.0.0.1:8001", "http://127.0.0.1:8002"]
