"""The CLI's help texts and small usage answers (issue 11, item 10's papercuts).

``moeperf --help`` describes the tool; ``moeperf target serve --help`` names itself and
shows every knob's default; calibrate's flags say what they are and calibrate's exit code
follows the run's status; a misspelt shipped spec gets the right name suggested.
"""

from __future__ import annotations

import argparse
import tomllib

import pytest

from moeperf.cli import build_parser, main
from moeperf.suites.errors import SpecError
from moeperf.suites.serving.calibrate import calibration_exit_code
from moeperf.suites.spec_files import SPEC_DIR, resolve_spec_path
from moeperf.targets.serving.__main__ import _KNOB_FLAGS
from moeperf.targets.serving.config import ReferenceTargetConfig


def help_of(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--help"])
    assert exited.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # argparse's wrapping undone


def test_moeperf_help_describes_the_tool_and_its_exit_codes(capsys):
    text = help_of(capsys)
    assert "The ``moeperf`` command line." not in text
    assert "TTFT, TPOT, ITL, throughput and goodput" in text
    assert "moeperf run default" in text and "moeperf report latest" in text
    assert "exit codes: 0 complete, 1 the run ended invalid or failed, 2 bad input" in text


def test_target_serve_help_names_itself_and_shows_every_default(capsys):
    text = help_of(capsys, "target", "serve")
    assert text.startswith("usage: moeperf target serve ")
    assert "python -m moeperf.targets.serving" not in text
    for flag, field, _kind, _help in _KNOB_FLAGS:
        default = ReferenceTargetConfig.model_fields[field].default
        assert f"{flag} " in text
        # argparse may break a long default across lines: compare without spaces.
        assert f"(default:{default})" in text.replace(" ", ""), flag
    assert "(default: True)" in text  # --enable-prefix-caching
    assert "(default: 8000)" in text and "(default: 127.0.0.1)" in text


def test_target_train_help_names_itself(capsys):
    text = help_of(capsys, "target", "train")
    assert text.startswith("usage: moeperf target train ")
    assert "python -m moeperf.targets.model.train" not in text
    assert "--out OUT" in text and "--steps STEPS" in text


def test_target_serve_help_says_the_default_bench_runs_mtp_and_serve_does_not(capsys):
    text = help_of(capsys, "target", "serve")
    bench = tomllib.loads((SPEC_DIR / "default.toml").read_text(encoding="utf-8"))
    mtp = bench["target"]["reference"]["mtp_tokens"]
    assert ReferenceTargetConfig.model_fields["mtp_tokens"].default == 0
    assert "MTP off (--mtp-tokens 0)" in text
    assert f"MTP with {mtp} draft tokens" in text and f"--mtp-tokens {mtp}" in text


def subparser(name: str) -> argparse.ArgumentParser:
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return commands.choices[name]


def test_every_calibrate_flag_has_help_with_its_default(capsys):
    flags = [a for a in subparser("calibrate")._actions if a.option_strings and a.dest != "help"]
    assert len(flags) == 7
    for action in flags:
        assert action.help and "(default: %(default)s)" in action.help, action.dest
    text = help_of(capsys, "calibrate")
    assert "(default: 1,16,64,256)" in text and "Exit 0 when the run completes, 1" in text


def test_calibrate_exits_1_when_its_run_is_invalid_or_aborted():
    # `moeperf run`'s rule (docs/reference/cli.md), which calibrate used to ignore (always 0).
    assert calibration_exit_code("complete") == 0
    assert calibration_exit_code("invalid") == 1
    assert calibration_exit_code("aborted") == 1
    assert calibration_exit_code("failed") == 1


def test_a_misspelt_shipped_spec_gets_the_right_name_suggested():
    with pytest.raises(SpecError) as info:
        resolve_spec_path("defualt")
    message = str(info.value)
    assert "no spec file 'defualt' (did you mean 'default'?)" in message
    # Every shipped name, in order.
    listed = message.split("shipped specs: ", 1)[1].split(", ")
    assert listed == sorted(p.stem for p in SPEC_DIR.glob("*.toml"))
    assert {"default", "nightly", "faults", "training-sim-scale"} <= set(listed)
    with pytest.raises(SpecError) as far:
        resolve_spec_path("zzzz")
    assert "did you mean" not in str(far.value)


def test_moeperf_run_of_a_misspelt_spec_exits_2_suggesting_it(capsys):
    assert main(["run", "nightlly"]) == 2
    assert "did you mean 'nightly'?" in " ".join(capsys.readouterr().err.split())
