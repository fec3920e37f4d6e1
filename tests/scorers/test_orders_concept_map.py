"""The orders concept map: the committed JSON is what ``scripts/make_concept_map.py`` builds
from the data; the script refuses a data display its concept's words do not name; the
reader finds what a text names (a name inside a longer one left out); units: a human unit
must name its UCUM code."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from pytest_groundeval.fhir.concepts import concept_map
from pytest_groundeval.scorers.units import unit_names_code

ROOT = Path(__file__).resolve().parents[2]
SYNTHEA = ROOT.parent / "shared" / "data" / "synthea-r4"


def _script():
    spec = importlib.util.spec_from_file_location("make_concept_map", ROOT / "scripts" / "make_concept_map.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


@pytest.mark.skipif(not SYNTHEA.is_dir(), reason="the Synthea sample bundles are not beside the checkout")
def test_the_committed_map_is_the_built_one():
    built, problems = _script().build([SYNTHEA, ROOT / "fixtures" / "orders"])
    assert problems == []
    committed = json.loads((ROOT / "pytest_groundeval" / "fhir" / "concept_map.json").read_text(encoding="utf-8"))
    assert built == committed


def test_the_script_refuses_a_display_its_words_do_not_name(tmp_path):
    bundle = {"resourceType": "Bundle", "entry": [{"resource": {"resourceType": "Observation", "code": {"coding": [
        {"system": "http://loinc.org", "code": "4548-4", "display": "Lipid panel"}]}}}]}
    (tmp_path / "b.json").write_text(json.dumps(bundle))
    _, problems = _script().build([tmp_path])
    assert problems and "4548-4 display 'Lipid panel'" in problems[0]
    assert _script().main(["--source", str(tmp_path), "--out", str(tmp_path / "out.json")]) == 1
    assert not (tmp_path / "out.json").exists()


def test_mentions():
    cmap = concept_map()
    ids = [m.concept.id for m in cmap.mentions("Critical high, left upper arm, seated; HbA1c in blood")]
    assert ids == ["critical-high", "left-arm", "sitting", "hba1c", "blood"]
    assert [m.concept.id for m in cmap.mentions("Blood pressure, systolic")] == ["bp-panel", "systolic"]
    assert cmap.mentions("abnormally formed normalisation") == []  # word boundaries
    assert cmap.denoted("http://snomed.info/sct", "271650006").id == "diastolic"
    assert cmap.known_system("http://www.ama-assn.org/go/cpt") and not cmap.known_system("urn:x")


@pytest.mark.parametrize(("unit", "code", "ok"), [
    ("mmHg", "mm[Hg]", True), ("mm Hg", "mm[Hg]", True), ("mm[Hg]", "mm[Hg]", True), (None, "mm[Hg]", True),
    ("millimeters of mercury", "mm[Hg]", True), ("kPa", "mm[Hg]", False), ("cmH2O", "mm[Hg]", False),
    ("psi", "mm[Hg]", False), ("mg", "mg", True), ("milligrams", "mg", True), ("g", "mg", False),
    ("mL", "mg", False), ("%", "%", True), ("percent", "%", False)])
def test_unit_names_code(unit, code, ok):
    assert (unit_names_code(unit, code) is None) is ok
