"""ReferenceTargetConfig: defaults, validation at the edge, and the command line over it."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from moeperf.targets.openai_wire import WireVariant
from moeperf.targets.serving.__main__ import _config, _parser, main
from moeperf.targets.serving.config import ReferenceTargetConfig
from moeperf.targets.serving.engine.api import EngineConfig
from moeperf.targets.serving.errors import ReferenceConfigError


def test_defaults_are_the_engines_own() -> None:
    config = ReferenceTargetConfig()
    assert config.engine_config() == EngineConfig()
    assert config.served_model_name == "moeperf-tiny-moe"
    assert config.model_dir is None


def test_every_engine_knob_is_a_field() -> None:
    knobs = set(EngineConfig.__dataclass_fields__)
    assert knobs <= set(ReferenceTargetConfig.model_fields)


def test_knobs_reach_the_engine_config() -> None:
    config = ReferenceTargetConfig.from_fields(
        {"mtp_tokens": 2, "block_size": 32, "enable_prefix_caching": False, "dtype": "bfloat16"}
    )
    engine = config.engine_config()
    assert (engine.mtp_tokens, engine.block_size) == (2, 32)
    assert engine.enable_prefix_caching is False and engine.dtype == "bfloat16"


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"num_kv_blocks": 0}, "num_kv_blocks: Input should be greater than or equal to 1"),
        ({"max_waiting_requests": -1}, "max_waiting_requests"),
        ({"dtype": "float16"}, "dtype: Input should be 'float32' or 'bfloat16'"),
        ({"block_size": "16"}, "block_size"),
        ({"served_model_name": ""}, "served_model_name"),
        ({"max_batch_size": 8}, "max_batch_size: unknown field; valid fields: model_dir"),
        (
            {"max_running_requests": 64, "max_num_batched_tokens": 32},
            "max_num_batched_tokens must cover one decode step",
        ),
    ],
)
def test_bad_fields_are_named(fields: dict, named: str) -> None:
    with pytest.raises(ReferenceConfigError, match=named.replace("(", r"\(")):
        ReferenceTargetConfig.from_fields(fields)
    # The suites validate with model_validate and format pydantic's own error.
    with pytest.raises(ValidationError):
        ReferenceTargetConfig.model_validate(fields)


def test_from_json_refuses_what_is_not_an_object() -> None:
    with pytest.raises(ReferenceConfigError, match="not valid JSON"):
        ReferenceTargetConfig.from_json("{mtp_tokens: 1}")
    with pytest.raises(ReferenceConfigError, match="JSON object"):
        ReferenceTargetConfig.from_json("[1]")


def test_json_round_trip_as_the_harness_passes_it() -> None:
    config = ReferenceTargetConfig.from_fields({"model_dir": "/models/x", "mtp_tokens": 1})
    again = ReferenceTargetConfig.from_json(json.dumps(config.model_dump(mode="json")))
    assert again == config


def test_config_is_frozen() -> None:
    with pytest.raises(ValidationError):
        ReferenceTargetConfig().mtp_tokens = 3  # type: ignore[misc]  # the error under test


def test_flags_override_the_config_json() -> None:
    args = _parser().parse_args(
        [
            "--config",
            '{"mtp_tokens": 1, "block_size": 8, "seed": 5}',
            "--mtp-tokens",
            "2",
            "--no-enable-prefix-caching",
            "--model",
            "/models/tiny",
            "--max-context-len",
            "1024",
        ]
    )
    config = _config(args)
    assert config.mtp_tokens == 2  # the flag wins
    assert config.block_size == 8 and config.seed == 5  # the JSON stays
    assert config.enable_prefix_caching is False
    assert str(config.model_dir) == "/models/tiny"
    assert config.max_context_len == 1024


def test_unset_flags_leave_the_defaults() -> None:
    assert _config(_parser().parse_args([])) == ReferenceTargetConfig()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--config", "{oops"], "not valid JSON"),
        (["--threads", "-1"], "threads"),
        (["--port", "70000"], "--port must be in [0, 65535]"),
    ],
)
def test_main_exits_2_on_a_bad_config(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert message in captured.err
    assert captured.out == ""


# --- the wire switches (targets.openai_wire.WireVariant) ---------------------------------


def test_wire_switches_default_to_vllms_stream() -> None:
    assert ReferenceTargetConfig().wire_variant() == WireVariant()


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"usage": "last"}, "usage: Input should be 'as_requested', 'end_only' or 'never'"),
        ({"send_done": "false"}, "send_done: Input should be a valid boolean"),
        ({"role_chunk": 1}, "role_chunk: Input should be a valid boolean"),
        ({"reject_unknown_fields": None}, "reject_unknown_fields: Input should be a valid"),
    ],
)
def test_bad_wire_switches_are_named_with_what_is_valid(fields: dict, named: str) -> None:
    with pytest.raises(ReferenceConfigError, match=named):
        ReferenceTargetConfig.from_fields(fields)


def test_wire_flags_override_the_config_json() -> None:
    config_json = '{"usage": "never", "role_chunk": false, "send_done": true}'
    flags = ["--no-done", "--usage", "end_only", "--role-chunk", "--reject-unknown-fields"]
    config = _config(_parser().parse_args(["--config", config_json, *flags]))
    assert config.wire_variant() == WireVariant(
        send_done=False, usage="end_only", role_chunk=True, reject_unknown_fields=True
    )
    # Without the flags, the JSON stays; and it round-trips as the harness passes it.
    config = _config(_parser().parse_args(["--config", config_json, "--no-role-chunk"]))
    assert (config.usage, config.role_chunk, config.send_done) == ("never", False, True)
    assert ReferenceTargetConfig.from_json(json.dumps(config.model_dump(mode="json"))) == config


def test_a_bad_usage_flag_exits_2_listing_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        _parser().parse_args(["--usage", "last"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "argument --usage: invalid choice: 'last'" in err
    assert all(choice in err for choice in ("as_requested", "end_only", "never"))
