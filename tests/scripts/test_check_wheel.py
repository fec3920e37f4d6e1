"""The release's wheel check (scripts/check_wheel.py, run by .github/workflows/release.yml
before publishing): the wheel ``uv build`` makes holds every file of fixtures/ (as
pytest_groundeval/data/), of evals/ (as pytest_groundeval/suites/), the package's data files
and the entry points; a wheel that lacks any of them is named, file by file."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import check_wheel  # noqa: E402

UV = shutil.which("uv")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    if UV is None:
        pytest.skip("uv is not installed")
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run([UV, "build", "--wheel", "--no-build-isolation", "-o", str(dist), str(ROOT)], cwd=ROOT,
                   env={**__import__("os").environ, "UV_OFFLINE": "1"}, check=True, capture_output=True, timeout=300)
    return next(dist.glob("groundeval-*.whl"))


def test_the_built_wheel_holds_every_packaged_file(wheel):
    assert check_wheel.missing(wheel) == []
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"pytest_groundeval/data/write_cases/ibuprofen-two-tablets.json", "pytest_groundeval/suites/test_write.py",
            "pytest_groundeval/record.schema.json"} <= names
    assert len([n for n in names if n.startswith("pytest_groundeval/data/synthea/")]) == 45
    assert check_wheel.main([str(wheel)]) == 0


def test_a_wheel_without_a_fixture_or_an_entry_point_is_named(wheel, tmp_path):
    broken = tmp_path / wheel.name
    dropped = "pytest_groundeval/data/write_cases/ibuprofen-two-tablets.json"
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(broken, "w") as dst:
        for info in src.infolist():
            if info.filename == dropped:
                continue
            data = src.read(info)
            if info.filename.endswith(".dist-info/entry_points.txt"):
                data = data.replace(b"[pytest11]\ngroundeval = pytest_groundeval.pytest.plugin\n", b"")
            dst.writestr(info, data)
    assert check_wheel.missing(broken) == [
        dropped, "entry point 'groundeval = pytest_groundeval.pytest.plugin' in [pytest11]"]
    assert check_wheel.main([str(broken)]) == 1
