"""The case generators (scripts/make_{reconciliation,labs,orders}_cases.py) pointed at a source
they can make nothing of: a wrong or empty folder is refused (exit 2) naming it, a folder whose
bundles give no case is refused (exit 1), and in both the --out folder keeps what it holds
(each generator replaces --out's cases: an empty run used to delete them and exit 0). A bundle
with nothing dated (the orders generator sets a case's day after the record's last date) is
skipped by name instead of crashing the run."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"
SOURCE_OPTION = {"reconciliation": "--fixtures", "labs": "--source", "orders": "--source"}


def generator(name: str):
    spec = importlib.util.spec_from_file_location(f"make_{name}_cases", ROOT / "scripts" / f"make_{name}_cases.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def patient_only_bundle(folder: Path) -> Path:
    """A real Synthea patient (a committed fixture) trimmed to its Patient resource."""
    bundle = json.loads((FIXTURES / "synthea" / "Adalberto_Hartmann_44ec4447-9e2c-4eb9-bd4f-0bdb416b806e.json").read_bytes())
    bundle["entry"] = [e for e in bundle["entry"] if e["resource"]["resourceType"] == "Patient"]
    assert len(bundle["entry"]) == 1
    folder.mkdir()
    path = folder / "Adalberto_Hartmann_44ec4447.json"
    path.write_text(json.dumps(bundle))
    return path


@pytest.fixture
def out(tmp_path) -> Path:
    folder = tmp_path / "out"
    (folder / "bundles").mkdir(parents=True)
    (folder / "mine.json").write_text("{}")
    (folder / "bundles" / "mine.json").write_text("{}")
    return folder


def kept(out: Path) -> bool:
    return (out / "mine.json").read_text() == "{}" and (out / "bundles" / "mine.json").read_text() == "{}"


@pytest.mark.parametrize("name", sorted(SOURCE_OPTION))
@pytest.mark.parametrize("source", ["missing", "empty", "ndjson"])
def test_a_source_with_no_bundle_is_refused_and_out_is_kept(tmp_path, out, capsys, name, source):
    folder = tmp_path / "src"
    if source != "missing":
        folder.mkdir()
    if source == "ndjson":  # bulk-export files are not bundles
        (folder / "Patient.ndjson").write_text("{}\n")
    assert generator(name).main([SOURCE_OPTION[name], str(folder), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{SOURCE_OPTION[name]} {folder}" in err and ".json.gz" in err and "nothing written" in err
    assert kept(out)


@pytest.mark.parametrize("name", sorted(SOURCE_OPTION))
def test_bundles_that_give_no_case_are_refused_and_out_is_kept(tmp_path, out, capsys, name):
    patient_only_bundle(tmp_path / "src")
    assert generator(name).main([SOURCE_OPTION[name], str(tmp_path / "src"), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "no case could be made from the 1 bundle(s)" in err and str(out) in err
    assert kept(out)
    if name == "orders":  # skipped by name, not a crash on its missing dates
        assert "skipped Adalberto_Hartmann_44ec4447.json: no dated resource" in err
