import pytest

from suites.errors import SpecError
from suites.spec import SPEC_DIR, apply_overrides, load_spec, parse_override


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
