import io

import pytest
from rich.console import Console

from moeperf.cli import main
from moeperf.collectors.store import RunStore
from moeperf.specs import load_spec, validate_spec
from moeperf.suites.errors import SpecError
from moeperf.suites.serving.calibrate import CalibrationOptions, run_calibration
from moeperf.suites.serving.spec import ServingSpec
from moeperf.suites.spec_files import SPEC_DIR
from moeperf.suites.spec_overrides import apply_overrides, parse_override
from moeperf.targets.synthetic.config import SyntheticConfig


def write(tmp_path, text: str):
    path = tmp_path / "spec.toml"
    path.write_text('name = "t"\n' + text)
    return str(path)


def test_shipped_specs_validate():
    names = [p.stem for p in SPEC_DIR.glob("*.toml")]
    assert "default" in names
    for name in names:
        load_spec(name)


def test_unknown_field_names_itself_suggests_and_lists_valid_fields(tmp_path):
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, "[load]\nlevles = [1]\n"))
    message = str(info.value)
    assert "load.levles: unknown field" in message
    assert "did you mean 'levels'" in message
    assert "duration_s" in message and "warmup_s" in message


def test_bad_choice_lists_valid_choices(tmp_path):
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, '[target]\napi = "responses"\n'))
    assert "target.api" in str(info.value)
    assert "'chat'" in str(info.value) and "'completions'" in str(info.value)


def test_cross_field_rules(tmp_path):
    with pytest.raises(SpecError, match=r"warmup_s \+ load\.cooldown_s"):
        load_spec(write(tmp_path, "[load]\nduration_s = 1\nwarmup_s = 1\n"))
    with pytest.raises(SpecError, match=r"target.url must be"):
        load_spec(write(tmp_path, '[target]\nkind = "url"\n'))
    with pytest.raises(SpecError, match="whole numbers"):
        load_spec(write(tmp_path, "[load]\nlevels = [1.5]\n"))
    with pytest.raises(SpecError, match=r"load\.ramp_s \(2\) must be at most load\.warmup_s \(1\)"):
        load_spec(write(tmp_path, "[load]\nramp_s = 2\n"))
    with pytest.raises(SpecError, match=r"load\.ramp_s spreads the streams of mode"):
        load_spec(write(tmp_path, "[load]\nmode = 'poisson'\nlevels = [4]\nramp_s = 0.5\n"))
    with pytest.raises(SpecError, match=r"does not run .*\[load\.ramp_s\]"):
        load_spec(write(tmp_path, "[load]\nengine = 'locust'\nramp_s = 0.5\n"))
    with pytest.raises(SpecError, match=r"load\.stop_over_saturated is for open-loop levels"):
        load_spec(write(tmp_path, "[load]\nstop_over_saturated = true\n"))
    poisson = "[load]\nmode = 'poisson'\nlevels = [4]\nstop_over_saturated = true\n"
    assert load_spec(write(tmp_path, poisson)).serving.load.stop_over_saturated


def test_max_requests_alone_bounds_a_level_with_no_cool_down(tmp_path):
    load = load_spec(write(tmp_path, "[load]\nmax_requests = 40\n")).serving.load
    assert (load.duration_s, load.cooldown_s, load.count_bound) == (None, 0.0, True)
    assert load.level_limit_s == 600.0  # the safety limit, stated in the run's notes
    # Without either bound, or with both, a level is bounded by time as before.
    plain = load_spec(write(tmp_path, "[load]\n")).serving.load
    assert (plain.duration_s, plain.cooldown_s, plain.count_bound) == (10.0, 0.5, False)
    both = load_spec(write(tmp_path, "[load]\nmax_requests = 40\nduration_s = 4\n")).serving
    assert (both.load.duration_s, both.load.count_bound) == (4.0, False)
    with pytest.raises(SpecError, match=r"load\.cooldown_s must be 0 when load\.max_requests"):
        load_spec(write(tmp_path, "[load]\nmax_requests = 40\ncooldown_s = 1\n"))
    with pytest.raises(SpecError, match=r"about 400 s of arrivals.*set load\.duration_s"):
        load_spec(write(tmp_path, '[load]\nmode = "poisson"\nlevels = [0.5]\nmax_requests = 200\n'))


def test_missing_name_and_bad_toml(tmp_path):
    path = tmp_path / "x.toml"
    path.write_text("[load]\n")
    with pytest.raises(SpecError, match="name: required field is missing"):
        load_spec(str(path))
    path.write_text("[load\n")
    with pytest.raises(SpecError, match="not valid TOML"):
        load_spec(str(path))


def test_unknown_spec_name_lists_shipped_specs():
    with pytest.raises(SpecError, match=r"shipped specs: .*default"):
        load_spec("no-such-spec")


def test_overrides_are_typed_and_validated(tmp_path):
    assert parse_override("load.levels=[1, 4]") == (["load", "levels"], [1, 4])
    assert parse_override("target.api=chat") == (["target", "api"], "chat")
    assert parse_override("load.duration_s=2.5") == (["load", "duration_s"], 2.5)
    data = apply_overrides({"load": {"levels": [1]}}, ["load.levels=[8]", "slo.ttft_s=0.1"])
    assert data == {"load": {"levels": [8]}, "slo": {"ttft_s": 0.1}}
    with pytest.raises(SpecError, match="KEY=VALUE"):
        parse_override("load.levels")
    with pytest.raises(SpecError, match=r"load.mode"):
        load_spec("default", ["load.mode=closed"])


# --- [target.synthetic] is validated by the target's own config ---------------------


def test_fault_rates_summing_over_one_exit_2_naming_the_fields(tmp_path, capsys):
    path = write(tmp_path, "[target.synthetic]\nerror_rate = 0.6\nstall_rate = 0.6\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    message = " ".join(str(info.value).split())
    assert message.startswith(f"{path}: invalid spec")
    assert "target.synthetic.error_rate + stall_rate + malformed_rate + truncate_rate" in message
    assert "at most one fault" in message and "got 1.2" in message

    assert main(["--runs-dir", str(tmp_path / "runs"), "run", path]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "error:" in err and "target.synthetic.error_rate + stall_rate" in err
    assert not (tmp_path / "runs").exists(), "no target may start for an invalid spec"


def test_synthetic_fields_are_the_targets_own(tmp_path):
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, "[target.synthetic]\nttft_ms = 0.05\n"))
    message = str(info.value)
    assert "target.synthetic.ttft_ms: unknown field; did you mean 'ttft_s'?" in message
    assert "valid fields: ttft_s, itl_s" in message
    with pytest.raises(SpecError, match=r"target\.synthetic\.itl_s: must be a finite number >= 0"):
        load_spec(write(tmp_path, "[target.synthetic]\nitl_s = -1\n"))
    with pytest.raises(SpecError, match=r"target\.synthetic\.jitter: must be one of none"):
        load_spec(write(tmp_path, '[target.synthetic]\njitter = "gaussian"\n'))
    spec = load_spec(write(tmp_path, "[target.synthetic]\nttft_s = 0.2\n")).serving
    assert spec.target.synthetic == SyntheticConfig(ttft_s=0.2)
    # The documented defaults (docs/reference/spec-fields.md).
    default = load_spec(write(tmp_path, "")).serving.target.synthetic
    assert (default.ttft_s, default.itl_s, default.tokens_per_chunk) == (0.05, 0.01, 1)
    assert (default.jitter, default.stall_s, default.error_rate) == ("none", 5.0, 0.0)


# --- a problem a --set caused names the flag -----------------------------------------


def test_a_set_typo_names_the_flag_and_its_value_not_the_spec_file(tmp_path, capsys):
    with pytest.raises(SpecError) as info:
        load_spec("default", ["load.duraton_s=5"])
    message = str(info.value)
    assert message.startswith("--set load.duraton_s=5: unknown field; did you mean 'duration_s'?")
    assert str(SPEC_DIR) not in message

    flag = ["--set", "target.synthetic.error_rate=2"]
    assert main(["--runs-dir", str(tmp_path / "runs"), "run", "default", *flag]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "error: --set target.synthetic.error_rate=2: must be a finite number in [0, 1]" in err


@pytest.mark.parametrize(
    ("flags", "blamed"),
    [
        (["--repeat", "0"], "--repeat 0: "),
        (["--workers", "0"], "--workers 0: "),
    ],
)
def test_a_problem_a_flag_made_is_blamed_on_that_flag(tmp_path, capsys, flags, blamed):
    # --repeat 0 used to be reported as "--set load.repeats=0", a flag nobody typed.
    assert main(["--runs-dir", str(tmp_path / "runs"), "run", "synthetic", *flags]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert blamed in err, err
    assert "--set load.repeats" not in err and "--set load.workers" not in err


def test_file_and_flag_problems_are_reported_apart(tmp_path):
    path = write(tmp_path, "[load]\nlevles = [1]\n")
    with pytest.raises(SpecError) as info:
        load_spec(path, ["lod.duration_s=5", "load.duration_s=4"])
    lines = str(info.value).splitlines()
    assert lines[0] == f"{path}: invalid spec"
    assert lines[1].startswith("  load.levles: unknown field")
    assert lines[2].startswith("--set lod.duration_s=5: lod: unknown field; did you mean 'load'?")
    assert len(lines) == 3


# --- every spec goes through validate_spec ------------------------------------------


def test_validate_spec_keeps_the_data_as_given_and_leaves_it_unchanged():
    data = {"name": "t", "load": {"levels": [2]}}
    loaded = validate_spec(data, "test", ["load.duration_s=3"])
    assert loaded.given == {"name": "t", "load": {"levels": [2], "duration_s": 3}}
    assert data == {"name": "t", "load": {"levels": [2]}}
    assert isinstance(loaded.spec, ServingSpec) and loaded.spec.load.duration_s == 3
    assert loaded.source == "test"
    assert loaded.serving is loaded.spec
    with pytest.raises(SpecError, match="test: suite 'serving'; a training spec is needed"):
        _ = loaded.training


def test_calibrate_validates_its_spec_like_a_file(tmp_path):
    console = Console(file=io.StringIO())
    options = CalibrationOptions(duration_s=0.0, itl_s=-1.0)
    with pytest.raises(SpecError) as info:
        run_calibration(options, RunStore(tmp_path / "runs"), console)
    lines = str(info.value).splitlines()
    assert lines[0] == "calibrate: invalid spec"
    assert "  target.synthetic.itl_s: must be a finite number >= 0; got -1.0" in lines
    duration = "  load.duration_s: Input should be greater than 0"
    assert any(line.startswith(duration) for line in lines)
    assert not (tmp_path / "runs").exists()
