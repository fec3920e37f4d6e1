"""Reconciliation you can solve: every committed case is answerable from the prompt alone.

* The oracle (``tests/reconciliation_oracle.py``, a rule-based solver given only the rendered
  single-call prompt string) scores exact match 1.0 through the real scorer on every
  committed case; without the prompt's catalog section, or with a mention naming another
  drug, it fails those cases (so the check can fail).
* The generator words a drug from its own RxNorm display (a levonorgestrel IUD is
  "levonorgestrel ... IUD", never another contraceptive), and refuses a case whose note does
  not read back, mention by mention, to the recorded codes, naming the case.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import sys

import pytest
from conftest import FIXTURES, ROOT
from reconciliation_oracle import solve

from pytest_groundeval.model import AgentOutput
from pytest_groundeval.tasks.reconciliation import ReconciliationTask

CASES = FIXTURES / "reconciliation"
CATALOG = FIXTURES / "terminology" / "rxnorm.json"
KARENA = "Karena_Pfeffer_1f99a0cb-594b-476a-b9cb-502594c1ee6b"  # an active Liletta IUD, pill packs stopped
KYLEENA = "levonorgestrel 19.5 MG Intrauterine System"  # the RxNorm name of Kyleena's generic system


def _generator():
    spec = importlib.util.spec_from_file_location("make_reconciliation_cases", ROOT / "scripts" / "make_reconciliation_cases.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def gen():
    return _generator()


@pytest.fixture(scope="module")
def task() -> ReconciliationTask:
    return ReconciliationTask(CASES)


@pytest.fixture(scope="module")
def cases(task):
    return {ref.case_id: task.load(ref) for ref in task.discover()}


def oracle_score(task, case, prompt=None):
    return task.score(task.parse(AgentOutput(text=solve(case.prompt if prompt is None else prompt))), case)


# ------------------------------------------------------------------ the oracle
def test_the_oracle_solves_every_committed_case_from_the_prompt_alone(task, cases):
    assert len(cases) == 47
    failed = {cid: s.reason for cid, case in sorted(cases.items()) if (s := oracle_score(task, case)).metrics["exact_match"] != 1.0}
    assert failed == {}
    verdicts = {t["verdict"] for c in cases.values() for t in c.truth}
    assert verdicts == {"matched", "unreported", "unrecorded", "stopped-but-taking"}  # every class is solved


def test_without_the_catalog_section_the_oracle_cannot_code_unrecorded_items(task, cases):
    """The catalog entries in the prompt are what make an unrecorded item answerable."""
    for cid, case in cases.items():
        head, rest = case.prompt.split("\n\nSite RxNorm catalog", 1)
        header, after = rest.split(":\n", 1)
        bare = head + "\n\nSite RxNorm catalog" + header + ":\n" + "(none)"
        unrecorded = any(t["verdict"] == "unrecorded" for t in case.truth)
        assert (oracle_score(task, case, bare).metrics["exact_match"] == 1.0) is (not unrecorded), cid


def test_the_catalog_section_does_not_give_the_unrecorded_items_away(task, cases):
    """Gaming the list: "every listed entry the record lacks is unrecorded" is wrong on every
    case that has an unrecorded item (the list holds entries that share a word with the note
    and are not what the patient takes), and the real scorer fails it."""
    from reconciliation_oracle import record, sections

    for cid, case in cases.items():
        truth = {t["code"] for t in case.truth if t["verdict"] == "unrecorded"}
        if not truth:
            continue
        _, listed, bundle = sections(case.prompt)
        displays, _ = record(bundle)
        guess = {c for c, _ in listed if c not in displays}
        assert guess - truth, cid
        gamed = [t for t in case.truth if t["verdict"] != "unrecorded"] + [
            {"code": c, "display": "", "verdict": "unrecorded"} for c in sorted(guess)]
        assert not task.score(task.parse(AgentOutput(text=json.dumps({"medications": gamed}))), case).passed, cid


def test_a_mention_naming_another_drug_fails_the_oracle(task, cases):
    """The note must say the coded drug: the old generator's wording of an IUD as the
    norelgestromin patch reads as no medication of the record."""
    case = next(c for c in cases.values() if any(t["verdict"] == "matched" for t in c.truth))
    data = json.loads(case.ref.path.read_text())
    r = next(r for r in data["reported"] if r["source"] == "active")
    wrong = case.prompt.replace(r["wording"], "norelgestromin-ethinyl estradiol IUD", 1)
    s = oracle_score(task, case, wrong)
    assert s.metrics["exact_match"] == 0.0 and f"{r['code']} said unreported" in s.reason


# ------------------------------------------------------------------ wording from the coded drug
def test_contraceptive_wording_comes_from_the_concepts_own_name(gen):
    iud = gen.parse_display("9000001", KYLEENA)
    texts = [w.text for w in gen.wordings(iud)]
    assert texts == ["levonorgestrel IUD", "levonorgestrel 19.5 mg IUD"]
    assert [w.text for w in gen.wordings(gen.parse_display("1", "Kyleena 19.5 MG Intrauterine System"))] == [
        "Kyleena IUD", "Kyleena 19.5 mg IUD"]
    patch = gen.parse_display("1534809", "168 HR Ethinyl Estradiol 0.00146 MG/HR / norelgestromin 0.00625 MG/HR "
                                         "Transdermal System")
    assert [w.text for w in gen.wordings(patch)] == ["ethinyl estradiol-norelgestromin patch"]
    implant = gen.parse_display("389221", "Etonogestrel 68 MG Drug Implant")
    assert [w.text for w in gen.wordings(implant)] == ["etonogestrel implant", "etonogestrel 68 mg implant"]
    # against a record that also holds Mirena (levonorgestrel 52 mg, by brand), only the
    # wording with the strength is unambiguous; the patch never reads as the IUD
    mirena = gen.parse_display("807283", "Mirena 52 MG Intrauterine System")
    assert [w.text for w in gen.unambiguous(iud, [iud, mirena, patch])] == ["levonorgestrel 19.5 mg IUD"]
    # a pill pack's brand is a pill pack: never confused with an implant or an IUD
    camila = gen.parse_display("748962", "Camila 28 Day Pack")
    assert [w.text for w in gen.unambiguous(camila, [camila, implant, iud])] == ["Camila"]
    record = {"9000001": KYLEENA, "807283": mirena.display, "1534809": patch.display}
    assert gen.resolve("levonorgestrel 19.5 mg IUD", record, {}) == ["9000001"]
    assert gen.resolve("norelgestromin-ethinyl estradiol IUD", record, {}) == []
    assert gen.resolve("ethinyl estradiol-norelgestromin patch", record, {}) == ["1534809"]


def _karena_with_kyleena(tmp_path):
    """Karena's real bundle with her active IUD coded as the generic levonorgestrel 19.5 mg system."""
    bundle = json.loads((FIXTURES / "synthea" / f"{KARENA}.json").read_text())
    for e in bundle["entry"]:
        r = e["resource"]
        coding = (r.get("medicationCodeableConcept") or {}).get("coding") or [{}]
        if r["resourceType"] == "MedicationRequest" and coding[0].get("code") == "1605257":
            coding[0].update(code="9000001", display=KYLEENA)  # a test code; the display is RxNorm's name
    folder = tmp_path / "synthea"
    folder.mkdir()
    (folder / f"{KARENA}.json").write_text(json.dumps(bundle))
    return folder


def test_a_kyleena_patients_notes_name_levonorgestrel_and_are_solvable(gen, tmp_path, capsys):
    bundles = _karena_with_kyleena(tmp_path)
    out = tmp_path / "cases"
    assert gen.main(["--fixtures", str(bundles), "--catalog", str(CATALOG), "--out", str(out)]) == 0
    made = sorted(out.glob("*.json"))
    assert made
    said = [r["wording"] for p in made for r in json.loads(p.read_text())["reported"] if r["code"] == "9000001"]
    assert said and all(w.startswith("levonorgestrel") and w.endswith("IUD") for w in said), said
    assert not any("norelgestromin" in json.loads(p.read_text())["patient_report"] for p in made)
    t = ReconciliationTask(out)
    for ref in t.discover():
        case = t.load(ref)
        assert oracle_score(t, case).metrics["exact_match"] == 1.0, ref.case_id


# ------------------------------------------------------------------ the generator's self-check
def test_every_committed_note_reads_back_to_its_codes(gen, cases):
    site = {str(e["code"]): e["display"] for e in json.loads(CATALOG.read_text())}
    for cid, case in cases.items():
        data = json.loads(case.ref.path.read_text())
        bundle = json.loads(case.inputs["bundle_json"])
        p = gen.read_patient(case.ref.path.parent / data["bundle"])
        gen.check_round_trip(data, {c: m.display for c, m in p.meds.items()}, site)  # raises if not
        assert len(gen.note_items(data["patient_report"])) == len(data["reported"]), cid
        assert bundle["resourceType"] == "Bundle"
    # swapping two mentions' codes is refused, naming the case and the mention
    data = copy.deepcopy(json.loads(next(c for c in cases.values() if len(json.loads(c.ref.path.read_text())["reported"]) >= 2).ref.path.read_text()))
    data["reported"][0]["code"], data["reported"][1]["code"] = data["reported"][1]["code"], data["reported"][0]["code"]
    p = gen.read_patient(CASES / data["bundle"])
    with pytest.raises(gen.Refused, match=rf"{data['case_id']}: the mention '.+' reads back as"):
        gen.check_round_trip(data, {c: m.display for c, m in p.meds.items()}, site)


def test_a_case_whose_note_does_not_read_back_is_refused_and_nothing_is_written(gen, tmp_path, capsys, monkeypatch):
    """The old defect, put back: an IUD written into the note as the norelgestromin patch.
    The generator refuses that case by name, writes nothing and deletes nothing."""
    bundles = _karena_with_kyleena(tmp_path)
    out = tmp_path / "cases"
    out.mkdir()
    (out / "kept.json").write_text("{}")
    real_item = gen._item
    monkeypatch.setattr(gen, "_item", lambda w, med, rng: "norelgestromin-ethinyl estradiol IUD"
                        if med.form == "iud" else real_item(w, med, rng))
    assert gen.main(["--fixtures", str(bundles), "--catalog", str(CATALOG), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "refused: Karena_Pfeffer_1f99a0cb_" in err
    assert "the mention 'norelgestromin-ethinyl estradiol IUD' reads back as nothing, not 9000001" in err
    assert "nothing written" in err
    assert sorted(p.name for p in out.iterdir()) == ["kept.json"]
