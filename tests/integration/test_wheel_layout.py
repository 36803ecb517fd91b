"""The built wheel installs one top-level package, ``moeperf``: nothing named ``reports`` or
``collectors`` lands in a user's site-packages (pyproject's [tool.setuptools.packages.find])."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SUBPACKAGES = ("collectors", "targets", "suites", "reports", "dashboards")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # As `pip install .` builds it: an isolated build of the checkout.
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)],
        check=True,
        timeout=240,
    )
    (built,) = out.glob("moeperf-*.whl")
    return built


@pytest.mark.slow
def test_the_wheel_holds_moeperf_alone(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"moeperf"}
    # The linked folders arrive as real files, shipped data included.
    for package in SUBPACKAGES:
        assert f"moeperf/{package}/__init__.py" in names
    assert "moeperf/suites/specs/default.toml" in names
    assert "moeperf/targets/model/default/model.safetensors" in names


@pytest.mark.slow
def test_installed_wheel_imports_under_moeperf_only(wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), wheel],
        check=True,
        timeout=240,
    )
    probe = (
        "import importlib.util, sys\n"
        "import moeperf.reports, moeperf.collectors.store\n"
        f"assert moeperf.reports.__file__.startswith({str(site)!r}), moeperf.reports.__file__\n"
        f"missing = [n for n in {SUBPACKAGES!r} if importlib.util.find_spec(n) is None]\n"
        "print(','.join(missing))\n"
    )
    # Run outside the checkout, so that its folders are not on sys.path.
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().split(",") == list(SUBPACKAGES)
