"""Tests for scripts/make_fixtures.py (run in-process via its main(argv))."""

from __future__ import annotations

import gzip
import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
SMART_DIR = SHARED_DATA / "synthea-r4"
SEED_DIR = SHARED_DATA / "groundeval-seed" / "synthea"

RXNORM = "http://www.nlm.nih.gov/research/umls/rxnorm"
SNOMED = "http://snomed.info/sct"
KEEP = {"Patient", "MedicationRequest", "Medication", "Condition", "AllergyIntolerance"}


def _load_script():
    name = "make_fixtures"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / "make_fixtures.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses need the module registered
    spec.loader.exec_module(module)
    return module


mf = _load_script()


# --------------------------------------------------------------------------
# synthetic bundles
# --------------------------------------------------------------------------


def _patient(pid: str, given: str = "Test", family: str = "Patient", deceased: bool = False):
    res = {
        "resourceType": "Patient",
        "id": pid,
        "text": {"status": "generated", "div": "<div xmlns=\"http://www.w3.org/1999/xhtml\">x</div>"},
        "name": [{"use": "official", "family": family, "given": [given]}],
        "gender": "female",
    }
    if deceased:
        res["deceasedDateTime"] = "2020-01-01T00:00:00+00:00"
    return res


def _mr(mid: str, status: str, code: str | None = None, *, reference: str | None = None,
        coding: list | None = None, contained: list | None = None):
    res: dict = {"resourceType": "MedicationRequest", "id": mid}
    if contained is not None:
        res["contained"] = contained
    res["status"] = status
    res["intent"] = "order"
    if reference is not None:
        res["medicationReference"] = {"reference": reference}
    else:
        res["medicationCodeableConcept"] = {
            "coding": coding if coding is not None else [{"system": RXNORM, "code": code, "display": f"drug {code}"}],
        }
    res["subject"] = {"reference": "urn:uuid:p"}
    return res


def _med(mid: str, code: str, system: str = RXNORM):
    return {"resourceType": "Medication", "id": mid,
            "code": {"coding": [{"system": system, "code": code, "display": f"med {code}"}]}}


def _bundle(patient: dict, *resources: dict, transaction: bool = True) -> dict:
    entries = []
    for res in (patient, *resources):
        entry = {"fullUrl": f"urn:uuid:{res['id']}", "resource": res}
        if transaction:
            entry["request"] = {"method": "POST", "url": res["resourceType"]}
        entries.append(entry)
    return {"resourceType": "Bundle", "type": "transaction" if transaction else "collection",
            "entry": entries}


def _full_bundle(pid: str = "p1", **kw) -> dict:
    """A transaction bundle with kept and dropped resource types."""
    return _bundle(
        _patient(pid, **kw),
        {"resourceType": "Encounter", "id": f"{pid}-enc", "status": "finished"},
        {"resourceType": "Observation", "id": f"{pid}-obs", "status": "final",
         "code": {"text": "Héight"}},
        {"resourceType": "Condition", "id": f"{pid}-cond", "code": {"text": "Asthma"}},
        {"resourceType": "AllergyIntolerance", "id": f"{pid}-alg", "code": {"text": "Peanut"}},
        _mr(f"{pid}-mr1", "active", "111"),
        _mr(f"{pid}-mr2", "stopped", "111"),
        _mr(f"{pid}-mr3", "active", reference="#m1", contained=[_med("m1", "222")]),
        _med(f"{pid}-med", "333"),
        {"resourceType": "Claim", "id": f"{pid}-claim", "status": "active"},
    )


def _write(path: Path, bundle: dict | bytes) -> Path:
    data = bundle if isinstance(bundle, bytes) else json.dumps(bundle, ensure_ascii=False).encode()
    if path.name.endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    path.write_bytes(data)
    return path


def _run(*argv) -> int:
    return mf.main([str(a) for a in argv])


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


# --------------------------------------------------------------------------
# trimming, formats, names
# --------------------------------------------------------------------------


def test_only_five_resource_types_survive(tmp_path, capsys):
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    _write(src / "one.json", _full_bundle())
    assert _run("--source", src, "--out", out, "--select", "all") == 0
    bundle = json.loads((out / "one.json").read_text(encoding="utf-8"))
    assert bundle["resourceType"] == "Bundle" and bundle["type"] == "collection"
    types = [e["resource"]["resourceType"] for e in bundle["entry"]]
    assert set(types) == KEEP
    assert types == ["Patient", "Condition", "AllergyIntolerance", "MedicationRequest",
                     "MedicationRequest", "MedicationRequest", "Medication"]  # source order
    for e in bundle["entry"]:
        assert list(e) == ["fullUrl", "resource"]  # request dropped
    patient = bundle["entry"][0]["resource"]
    assert "text" not in patient
    assert patient["name"][0]["family"] == "Patient"
    mr3 = bundle["entry"][5]["resource"]
    assert mr3["contained"][0]["id"] == "m1"  # contained kept
    assert list(mr3) == ["resourceType", "id", "contained", "status", "intent",
                         "medicationReference", "subject"]  # key order kept


def test_json_gz_and_non_ascii_names(tmp_path, capsys):
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    _write(src / "Plain_Json_1.json", _full_bundle("a"))
    _write(src / "Zipped_2.json.gz", _full_bundle("b"))
    _write(src / "Adán_Portillo_3.json.gz", _full_bundle("c", given="Adán", family="Portillo"))
    (src / "MANIFEST.tsv").write_text("not a bundle\n")
    assert _run("--source", src, "--out", out, "--select", "all") == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["Plain_Json_1.json", "Zipped_2.json", "Adán_Portillo_3.json"])
    raw = (out / "Adán_Portillo_3.json").read_bytes()
    text = raw.decode("utf-8")
    assert "Adán" in text and "\\u00e1" not in text  # ensure_ascii=False
    assert text.endswith("}\n")
    assert text.startswith('{\n "resourceType": "Bundle",\n "type": "collection",\n')  # indent=1
    assert text == json.dumps(json.loads(text), ensure_ascii=False, indent=1) + "\n"
    assert "Adán_Portillo_3.json" in capsys.readouterr().out
    assert not [p for p in out.iterdir() if p.name.startswith(".tmp")]  # atomic, no leftovers


def test_determinism_byte_identical(tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    for i, name in enumerate(["b.json", "a.json.gz", "Ünïcode_é.json"]):
        _write(src / name, _full_bundle(f"p{i}", deceased=bool(i % 2)))
    out1, out2 = tmp_path / "o1", tmp_path / "o2"
    for mode in ("all", "stratified"):
        assert _run("--source", src, "--out", out1, "--select", mode, "--seed", "7") == 0
        first = _tree(out1)
        assert _run("--source", src, "--out", out2, "--select", mode, "--seed", "7") == 0
        assert _run("--source", src, "--out", out1, "--select", mode, "--seed", "7") == 0
        assert _tree(out2) == first == _tree(out1)


def test_corrupt_files_skipped_with_warning(tmp_path, capsys):
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    (src / "broken.json").write_text('{"resourceType": "Bundle", "entry": [')
    (src / "garbage.json.gz").write_bytes(b"this is not gzip")
    _write(src / "not_bundle.json", {"resourceType": "Patient", "id": "x"})
    _write(src / "no_patient.json", {"resourceType": "Bundle", "type": "collection",
                                     "entry": [{"resource": _mr("m", "active", "1")}]})
    _write(src / "good.json", _full_bundle())
    assert _run("--source", src, "--out", out, "--select", "all") == 0
    err = capsys.readouterr().err
    lines = err.splitlines()

    def warned(name, reason):
        return any(name in line and reason in line for line in lines)

    assert warned("broken.json", "not valid JSON"), err
    assert warned("garbage.json.gz", "decompress"), err
    assert warned("not_bundle.json", "not a FHIR Bundle"), err
    assert warned("no_patient.json", "no Patient"), err
    assert "good.json" not in err
    assert [p.name for p in out.iterdir()] == ["good.json"]


# --------------------------------------------------------------------------
# RxNorm codes
# --------------------------------------------------------------------------


def test_rxnorm_chosen_by_system_not_position():
    coding = [{"system": SNOMED, "code": "999999", "display": "snomed first"},
              {"system": RXNORM, "code": "314076", "display": "lisinopril"}]
    bundle = _bundle(_patient("p"), _mr("m1", "active", coding=coding),
                     _mr("m2", "active", coding=[{"system": SNOMED, "code": "1"}]))
    assert mf.active_codes(bundle) == {"314076"}
    assert mf.rxnorm_code({"coding": coding}) == "314076"
    assert mf.rxnorm_code({"coding": [{"system": SNOMED, "code": "1"}]}) is None


def test_medication_reference_resolution():
    contained_mr = _mr("mc", "active", reference="#med-c",
                       contained=[_med("other", "000"), _med("med-c", "1001")])
    urn_mr = _mr("mu", "active", reference="urn:uuid:med-u")
    rel_mr = _mr("mr", "active", reference="Medication/med-r")
    # Medication whose coding[0] is not RxNorm: code still chosen by system
    mixed = {"resourceType": "Medication", "id": "med-r", "code": {"coding": [
        {"system": SNOMED, "code": "5"}, {"system": RXNORM, "code": "1003"}]}}
    stopped = _mr("ms", "stopped", reference="urn:uuid:med-u")
    bundle = _bundle(_patient("p"), contained_mr, urn_mr, rel_mr, stopped,
                     _med("med-u", "1002"), mixed, transaction=False)
    # Medication/<id> must resolve even when fullUrl is a urn:uuid
    bundle["entry"][-1]["fullUrl"] = "urn:uuid:something-else"
    assert mf.active_codes(bundle) == {"1001", "1002", "1003"}
    assert mf.stopped_and_active_codes(bundle) == {"1002"}
    # unresolvable references are ignored, not guessed
    dangling = _bundle(_patient("p"), _mr("md", "active", reference="#nope"),
                       _mr("me", "active", reference="urn:uuid:missing"))
    assert mf.active_codes(dangling) == set()


def test_stopped_or_completed_and_active():
    b = _bundle(_patient("p"), _mr("1", "completed", "10"), _mr("2", "active", "10"),
                _mr("3", "stopped", "20"), _mr("4", "active", "30"))
    assert mf.stopped_and_active_codes(b) == {"10"}
    assert mf.active_codes(b) == {"10", "30"}


def test_stratum_boundaries():
    assert [mf.stratum_of(n) for n in (0, 1, 3, 4, 8, 9, 20)] == [
        "0", "1-3", "1-3", "4-8", "4-8", ">8", ">8"]


# --------------------------------------------------------------------------
# stratified selection and table
# --------------------------------------------------------------------------


def _patient_with(pid: str, n_active: int, *, deceased=False, stopped_active=False) -> dict:
    mrs = [_mr(f"{pid}-a{i}", "active", str(1000 + i)) for i in range(n_active)]
    if stopped_active:
        mrs.append(_mr(f"{pid}-s", "stopped", "1000"))
    else:
        mrs.append(_mr(f"{pid}-s", "stopped", "9999"))
    return _bundle(_patient(pid, given=pid, deceased=deceased), *mrs)


@pytest.mark.parametrize("seed", ["0", "1", "abc"])
def test_stratified_selection_and_table(tmp_path, capsys, seed):
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    specs = {
        "s0a": (0, False, False), "s0b": (0, False, False), "s0c": (0, True, False),
        "s0d": (0, False, False),
        "s1a": (2, False, False), "s1b": (3, True, True), "s1c": (1, False, False),
        "s1d": (2, False, False),
        "s4a": (5, False, True), "s4b": (4, False, False), "s4c": (8, False, False),
    }
    for pid, (n, dec, sa) in specs.items():
        _write(src / f"{pid}.json", _patient_with(pid, n, deceased=dec, stopped_active=sa))
    assert _run("--source", src, "--out", out, "--per-stratum", "1", "--seed", seed) == 0
    stdout = capsys.readouterr().out
    # one per stratum, and the 2 deceased + 2 stopped-and-active are forced in
    assert sorted(p.name for p in out.iterdir()) == ["s0c.json", "s1b.json", "s4a.json"]
    assert "selected/available" in stdout and "deceased" in stdout and "stopped+active" in stdout
    rows = {line.split()[0]: line.split()[1:] for line in stdout.splitlines()
            if line.split() and line.split()[0] in ("0", "1-3", "4-8", ">8", "total")}
    assert rows["0"] == ["1/4", "1/1", "0/0"]
    assert rows["1-3"] == ["1/4", "1/1", "1/1"]
    assert rows["4-8"] == ["1/3", "0/0", "1/1"]
    assert rows[">8"] == ["0/0", "0/0", "0/0"]
    assert rows["total"] == ["3/11", "2/2", "2/2"]
    assert "stratum >8: only 0 candidate(s)" in stdout
    assert "wrote 3 file(s)" in stdout
    for name in ("s0c.json", "s1b.json", "s4a.json"):
        assert name in stdout


def test_stratified_default_takes_all_when_fewer(tmp_path, capsys):
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    for i in range(3):
        _write(src / f"p{i}.json", _patient_with(f"p{i}", i))
    assert _run("--source", src, "--out", out) == 0
    stdout = capsys.readouterr().out
    assert len(list(out.iterdir())) == 3
    assert "stratum 0: only 1 candidate(s), fewer than 10 requested; took all" in stdout


def test_multiple_sources(tmp_path, capsys):
    a, b, out = tmp_path / "a", tmp_path / "b", tmp_path / "out"
    a.mkdir(), b.mkdir()
    _write(a / "x.json", _full_bundle("x"))
    _write(b / "y.json.gz", _full_bundle("y"))
    _write(b / "x.json", _full_bundle("x2"))  # same output name: first source wins
    assert _run("--source", a, "--source", b, "--out", out, "--select", "all") == 0
    assert sorted(p.name for p in out.iterdir()) == ["x.json", "y.json"]
    assert '"x"' in (out / "x.json").read_text(encoding="utf-8")
    assert "already taken" in capsys.readouterr().err


# --------------------------------------------------------------------------
# real Synthea data (shared folder next to the repo)
# --------------------------------------------------------------------------

needs_smart = pytest.mark.skipif(
    not SMART_DIR.is_dir(), reason=f"shared Synthea R4 sample data not found at {SMART_DIR}")
needs_seed = pytest.mark.skipif(
    not SEED_DIR.is_dir(), reason=f"groundeval seed fixtures not found at {SEED_DIR}")


@needs_smart
def test_real_smart_bundles(tmp_path, capsys):
    files = sorted(SMART_DIR.glob("*.json.gz"))
    assert files, "no bundles in shared data folder"
    picks = [f for f in files if not f.name.isascii()][:1] + [f for f in files if f.name.isascii()][:2]
    src = tmp_path / "src"
    src.mkdir()
    for f in picks:
        shutil.copy(f, src / f.name)
    out1, out2 = tmp_path / "o1", tmp_path / "o2"
    assert _run("--source", src, "--out", out1, "--select", "all") == 0
    assert _run("--source", src, "--out", out2, "--select", "all") == 0
    assert _tree(out1) == _tree(out2)
    assert sorted(out1.iterdir()) and len(list(out1.iterdir())) == len(picks)
    for f in picks:
        stem = f.name[: -len(".json.gz")]
        trimmed_raw = (out1 / f"{stem}.json").read_bytes()
        original = json.loads(gzip.decompress(f.read_bytes()))
        trimmed = json.loads(trimmed_raw)
        assert trimmed["type"] == "collection"
        assert {e["resource"]["resourceType"] for e in trimmed["entry"]} <= KEEP
        assert all("request" not in e for e in trimmed["entry"])
        # every kept resource is unchanged (apart from the Patient narrative)
        kept = [e["resource"] for e in original["entry"] if e["resource"]["resourceType"] in KEEP]
        for res in kept:
            if res["resourceType"] == "Patient":
                res.pop("text", None)
        assert [e["resource"] for e in trimmed["entry"]] == kept
        assert len(trimmed_raw) < len(gzip.decompress(f.read_bytes())) / 5
        assert mf.active_codes(trimmed) == mf.active_codes(original)


@needs_seed
def test_seed_patients_active_counts(tmp_path, capsys):
    expected = {"Alena": 0, "Clarissa": 2, "Felicitas": 3, "Gerda": 5, "Chiquita": 7, "Eilene": 8}
    out = tmp_path / "out"
    assert _run("--source", SEED_DIR, "--out", out, "--select", "all") == 0
    got = {}
    for p in sorted(out.iterdir()):
        bundle = json.loads(p.read_text(encoding="utf-8"))
        first = next(k for k in expected if p.name.startswith(k))
        got[first] = len(mf.active_codes(bundle))
        if first == "Eilene":
            assert mf.is_deceased(mf.patient_of(bundle))
    assert got == expected
    # re-trimming an already trimmed fixture is a fixed point
    again = tmp_path / "again"
    assert _run("--source", out, "--out", again, "--select", "all") == 0
    assert _tree(again) == _tree(out)


def test_committed_fixtures_are_canonical():
    """The committed fixtures are in the script's canonical output form."""
    folder = REPO / "fixtures" / "synthea"
    files = sorted(folder.glob("*.json")) if folder.is_dir() else []
    if not files:
        pytest.skip(f"no committed fixtures in {folder}")
    for f in files:
        raw = f.read_bytes()
        bundle = json.loads(raw)
        assert bundle["type"] == "collection", f.name
        assert {e["resource"]["resourceType"] for e in bundle["entry"]} <= KEEP, f.name
        assert mf.dump_json(mf.trim_bundle(bundle)) == raw, f.name


def test_a_source_with_no_readable_bundle_is_an_error_not_zero_files(tmp_path, capsys):
    """A wrong --source (missing, empty, or only unreadable files) exits 2 naming it and
    writes nothing; it used to print "wrote 0 file(s)" and exit 0."""
    empty, broken, out = tmp_path / "empty", tmp_path / "broken", tmp_path / "out"
    empty.mkdir(), broken.mkdir()
    (broken / "bad.json").write_text("not json")
    for src in (tmp_path / "missing", empty, broken):
        assert _run("--source", src, "--out", out, "--select", "all") == 2
        err = capsys.readouterr().err
        assert f"no readable Synthea bundle (.json or .json.gz) in --source {src}" in err
        assert not out.exists()
