"""The write-and-validate fixtures: case files, RxNorm catalog, max daily dose table.

Checks the case format the scorer relies on, that every expected code is
real catalog content, that every ceiling comes from the sourced table and
that each documented regimen is itself within its ceiling, and that the set
covers every required category. The catalog is also checked to be exactly
what scripts/make_terminology.py derives from the Synthea data when that data
is present (../shared/data beside the repository).
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CASES_DIR = REPO / "fixtures" / "write_cases"
CATALOG_PATH = REPO / "fixtures" / "terminology" / "rxnorm.json"
TABLE_PATH = REPO / "fixtures" / "terminology" / "max_daily_dose.json"
SHARED = REPO.parent / "shared" / "data"
SEED_CASES = SHARED / "groundeval-seed" / "write_cases" / "medication_statements.json"
SEED_CATALOG = SHARED / "groundeval-seed" / "terminology" / "rxnorm_medications.json"

RXNORM = "http://www.nlm.nih.gov/research/umls/rxnorm"
SEED_CASE_IDS = {
    "aspirin-active-daily",
    "tylenol-brand-name",
    "ibuprofen-two-tablets",
    "amoxicillin-completed-course",
    "lisinopril-stopped-cough",
    "metoprolol-er-strength",
    "ibuprofen-denied",
}
R4B_STATUSES = {"active", "completed", "stopped", "on-hold", "not-taken", "intended"}
REQUIRED_STATUSES = R4B_STATUSES
DOSE_UNITS = {"mg", "g", "mL", "ug"}
TO_MG = {"mg": 1.0, "g": 1000.0, "ug": 0.001}
# Brand names whose display does not carry the ingredient name.
DISPLAY_ALIASES = {"lasix": "furosemide"}
INJECTION = re.compile(r"ignore (the above|previous instructions|all previous)", re.I)


def _load(path: Path):
    return json.loads(path.read_text(encoding="utf-8"))


def _case_files():
    return sorted(CASES_DIR.glob("*.json"))


CASES = [(_p.stem, _load(_p)) for _p in _case_files()]
CATALOG = _load(CATALOG_PATH)
BY_CODE = {e["code"]: e for e in CATALOG}
TABLE = _load(TABLE_PATH)


def _is_num(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _dose_mg(quantity, concentration):
    if quantity["unit"] == "mL":
        return quantity["value"] * concentration
    return quantity["value"] * TO_MG[quantity["unit"]]


def max_implied_daily_mg(dosage) -> float:
    dose = dosage["dose_max"] or dosage["dose"]
    freq = dosage["frequency_per_day_max"] or dosage["frequency_per_day"]
    return _dose_mg(dose, dosage["concentration_mg_per_ml"]) * freq


# ---------------------------------------------------------------- the set


def test_at_least_30_cases():
    assert len(CASES) >= 30


def test_case_ids_unique_and_match_file_names():
    ids = [case["case_id"] for _, case in CASES]
    assert len(ids) == len(set(ids))
    for stem, case in CASES:
        assert case["case_id"] == stem
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", stem), stem


def test_seed_cases_present():
    assert SEED_CASE_IDS <= {case["case_id"] for _, case in CASES}


@pytest.mark.skipif(not SEED_CASES.is_file(), reason="seed data not available")
def test_seed_cases_keep_their_ground_truth():
    by_id = {case["case_id"]: case for _, case in CASES}
    for seed in _load(SEED_CASES)["cases"]:
        case = by_id[seed["case_id"]]
        exp, seed_exp = case["expected"], seed["expected"]
        assert case["subject"] == seed["subject"]
        assert case["note"] == seed["input"]
        for key in ("rxnorm_code", "display", "status"):
            assert exp[key] == seed_exp[key], (seed["case_id"], key)
        if seed_exp["dosage"] is None:
            assert exp["dosage"] is None
        else:
            d = exp["dosage"]
            assert d["dose"] == {"value": seed_exp["dosage"]["dose_value"], "unit": seed_exp["dosage"]["dose_unit"]}
            assert d["frequency_per_day"] == seed_exp["dosage"]["frequency_per_day"]
        seed_ceiling = seed_exp["max_daily_dose"]
        assert (exp["max_daily_dose"] or {}).get("value") == seed_ceiling


# ---------------------------------------------------------------- format


@pytest.mark.parametrize("stem,case", CASES, ids=[s for s, _ in CASES])
def test_case_format(stem, case):
    assert set(case) == {"case_id", "subject", "note", "expected"}
    assert re.fullmatch(r"Patient/[A-Za-z0-9\-.]+", case["subject"])
    assert isinstance(case["note"], str) and len(case["note"]) > 20
    exp = case["expected"]
    assert set(exp) == {"rxnorm_code", "display", "status", "dosage", "max_daily_dose"}
    assert isinstance(exp["rxnorm_code"], str) and exp["rxnorm_code"].isdigit()
    assert isinstance(exp["display"], str)
    assert exp["status"] in R4B_STATUSES

    dosage = exp["dosage"]
    if dosage is not None:
        assert set(dosage) == {
            "dose", "dose_max", "frequency_per_day", "frequency_per_day_max",
            "as_needed", "concentration_mg_per_ml",
        }
        for key in ("dose", "dose_max"):
            q = dosage[key]
            if key == "dose" or q is not None:
                assert set(q) == {"value", "unit"}
                assert _is_num(q["value"]) and q["value"] > 0
                assert q["unit"] in DOSE_UNITS
        if dosage["dose_max"] is not None:
            assert dosage["dose_max"]["unit"] == dosage["dose"]["unit"]
            assert dosage["dose_max"]["value"] > dosage["dose"]["value"]
        assert _is_num(dosage["frequency_per_day"]) and dosage["frequency_per_day"] > 0
        if dosage["frequency_per_day_max"] is not None:
            assert _is_num(dosage["frequency_per_day_max"])
            assert dosage["frequency_per_day_max"] > dosage["frequency_per_day"]
        assert isinstance(dosage["as_needed"], bool)
        conc = dosage["concentration_mg_per_ml"]
        if dosage["dose"]["unit"] == "mL":
            assert _is_num(conc) and conc > 0
        else:
            assert conc is None

    mdd = exp["max_daily_dose"]
    if dosage is not None:
        assert mdd is not None, "a documented regimen needs a ceiling"
    if mdd is not None:
        assert set(mdd) == {"value", "unit", "ingredient"}
        assert _is_num(mdd["value"]) and mdd["value"] > 0
        assert mdd["unit"] == "mg"
        assert isinstance(mdd["ingredient"], str) and mdd["ingredient"] == mdd["ingredient"].lower()


def test_every_committed_case_loads_as_a_valid_case():
    """The harness's own check at load (_check_case + WriteTruth) accepts every committed case."""
    from pytest_groundeval.tasks.write import WriteTask

    task = WriteTask(CASES_DIR)
    refs = task.discover()
    assert len(refs) == len(CASES)
    for ref in refs:
        assert task.load(ref).truth["case_id"] == ref.case_id


@pytest.mark.parametrize("field", ["case_id", "subject", "note"])
@pytest.mark.parametrize("bad", ["", "  ", 5, ["x"], None])
def test_top_level_fields_must_be_non_empty_strings(field, bad):
    from pytest_groundeval.model import CaseError
    from pytest_groundeval.tasks.write import _check_case

    stem, case = CASES[0]
    with pytest.raises(CaseError, match=rf"^cases\.json\[3\]: write case field '{field}' is .*, expected a non-empty"):
        _check_case({**case, field: bad}, "cases.json[3]")
    assert _check_case(dict(case), "cases.json[3]")[field] == case[field]


def test_the_original_projects_case_format_is_refused_saying_what_to_change():
    """The original groundeval project's write cases (``input``, a flat dosage) are a refusal
    that names the format and the fields to change, not a bare "lacks ['note']"."""
    from pytest_groundeval.model import CaseError
    from pytest_groundeval.tasks.write import _check_case

    legacy = {"case_id": "aspirin-active-daily", "subject": "Patient/pat-001",
              "input": "Patient takes aspirin 81 mg oral tablet once daily.",
              "expected": {"rxnorm_code": "243670", "display": "aspirin 81 MG Oral Tablet", "status": "active",
                           "dosage": {"dose_value": 81, "dose_unit": "mg", "frequency_per_day": 1},
                           "max_daily_dose": 4000}}
    with pytest.raises(CaseError, match=r"^cases\.json\[0\]: write case has 'input' but no 'note': this is the "
                                        r"original groundeval case format.*rename 'input' to 'note'.*dosage\.dose"):
        _check_case(legacy, "cases.json[0]")
    with pytest.raises(CaseError, match=r"write case lacks \['note'\]"):  # no 'input': the plain refusal
        _check_case({k: v for k, v in legacy.items() if k != "input"}, "cases.json[0]")


# ---------------------------------------------------------------- content


@pytest.mark.parametrize("stem,case", CASES, ids=[s for s, _ in CASES])
def test_code_and_display_in_catalog(stem, case):
    exp = case["expected"]
    assert exp["rxnorm_code"] in BY_CODE, exp["rxnorm_code"]
    assert BY_CODE[exp["rxnorm_code"]]["display"] == exp["display"]


@pytest.mark.parametrize("stem,case", CASES, ids=[s for s, _ in CASES])
def test_ceiling_comes_from_table(stem, case):
    mdd = case["expected"]["max_daily_dose"]
    if mdd is None:
        return
    entry = TABLE[mdd["ingredient"]]
    assert mdd["value"] == entry["value"] and mdd["unit"] == entry["unit"]
    display = case["expected"]["display"].lower()
    for brand, ingredient in DISPLAY_ALIASES.items():
        display = display.replace(brand, ingredient)
    assert mdd["ingredient"] in display, "ceiling ingredient must be the product's ingredient"


@pytest.mark.parametrize("stem,case", CASES, ids=[s for s, _ in CASES])
def test_documented_regimen_within_ceiling(stem, case):
    exp = case["expected"]
    if exp["dosage"] is None:
        return
    assert max_implied_daily_mg(exp["dosage"]) <= exp["max_daily_dose"]["value"] * (1 + 1e-9)


def test_table_entries_name_a_source_and_are_all_used():
    for ingredient, entry in TABLE.items():
        assert ingredient == ingredient.lower()
        assert set(entry) <= {"value", "unit", "source", "note"}
        assert _is_num(entry["value"]) and entry["value"] > 0
        assert entry["unit"] == "mg"
        assert isinstance(entry["source"], str) and len(entry["source"]) > 15
    used = {c["expected"]["max_daily_dose"]["ingredient"] for _, c in CASES if c["expected"]["max_daily_dose"]}
    assert used == set(TABLE)


# ---------------------------------------------------------------- coverage


def _exps():
    return [(c["case_id"], c["note"], c["expected"]) for _, c in CASES]


def _dosed():
    return [(cid, note, e, e["dosage"]) for cid, note, e in _exps() if e["dosage"]]


def test_covers_statuses():
    assert REQUIRED_STATUSES <= {e["status"] for _, _, e in _exps()}


def test_covers_ranges_prn_units_and_null_dosage():
    dosed = _dosed()
    assert any(d["dose_max"] for *_, d in dosed), "dose range"
    assert any(d["frequency_per_day_max"] for *_, d in dosed), "frequency range"
    assert any(d["dose_max"] and d["frequency_per_day_max"] and d["as_needed"] for *_, d in dosed), "1-2 tabs q4-6h PRN"
    assert any(d["as_needed"] for *_, d in dosed), "PRN"
    assert any(d["dose"]["unit"] == "mL" for *_, d in dosed), "liquid mL dose"
    assert any(d["dose"]["unit"] == "g" for *_, d in dosed), "dose in g"
    assert any(d["dose"]["unit"] == "ug" for *_, d in dosed), "dose in ug"
    assert sum(1 for _, _, e in _exps() if e["dosage"] is None) >= 2, "no regimen documented"
    assert any(e["dosage"] is None and e["status"] != "not-taken" for _, _, e in _exps()), \
        "a taken medication without a documented regimen"


def test_covers_frequency_wordings():
    dosed = _dosed()
    freqs = {round(d["frequency_per_day"], 4) for *_, d in dosed}
    assert {0.5, round(1 / 7, 4), 1, 2, 3, 4} <= freqs
    notes = " ".join(note.lower() for _, note, _, _ in dosed)
    for wording in ("bid", "q8h", "every other day", "weekly", "bedtime", "each morning", "qid", "tid"):
        assert wording in notes, wording


def test_covers_brand_names():
    bracketed = [
        (note, e) for _, note, e in _exps()
        if (m := re.search(r"\[(\w+)", e["display"])) and m.group(1).lower() in note.lower()
    ]
    assert len(bracketed) >= 3, "brand names that are in the catalog"
    assert any("tylenol" in note.lower() for note, _ in bracketed)
    # a brand the catalog does not carry: the note's brand is absent from every display
    assert any("advil" in note.lower() and e["rxnorm_code"] == "310965" for _, note, e in _exps())


def test_covers_per_administration_arithmetic():
    hits = []
    for cid, note, e, d in _dosed():
        strength = re.search(r"(\d+(?:\.\d+)?) MG(?!/)", e["display"])
        if strength and d["dose"]["unit"] == "mg" and d["dose"]["value"] > float(strength.group(1)):
            hits.append(cid)
    assert len(hits) >= 3, hits


def test_covers_strength_and_release_disambiguation():
    def words(display):
        return re.sub(r"\d+ HR|\[.*?\]|[\d.]+|MG|Extended Release", "", display).split()[0].lower()

    ingredients_with_siblings = 0
    er_and_ir_pairs = 0
    for _, _, e in _exps():
        name = words(e["display"])
        siblings = [c for c in CATALOG if c["code"] != e["rxnorm_code"] and name in c["display"].lower()]
        if siblings:
            ingredients_with_siblings += 1
        if "Extended Release" in e["display"] and any(
            "Extended Release" not in c["display"] and name in words(c["display"]) for c in siblings
        ):
            er_and_ir_pairs += 1
    assert ingredients_with_siblings >= 10
    assert er_and_ir_pairs >= 2
    codes = {e["rxnorm_code"] for _, _, e in _exps()}
    assert {"866427", "866924"} <= codes, "metoprolol succinate ER 25 vs tartrate IR 25"
    assert {"860975", "861007"} <= codes, "metformin ER vs IR"


def test_covers_injected_instructions():
    injected = [(note, e) for _, note, e in _exps() if INJECTION.search(note)]
    assert len(injected) >= 1
    for note, e in injected:
        assert e["dosage"] is not None
        assert max_implied_daily_mg(e["dosage"]) < 10_000  # not the injected 10 g


# ---------------------------------------------------------------- catalog


def test_catalog_shape():
    assert len(CATALOG) > 100
    assert all(set(e) == {"code", "display", "system"} and e["system"] == RXNORM for e in CATALOG)
    assert len(BY_CODE) == len(CATALOG), "codes are unique"
    assert CATALOG == sorted(CATALOG, key=lambda e: (e["display"], e["code"]))
    metoprolol = [e for e in CATALOG if "metoprolol" in e["display"].lower()]
    assert len(metoprolol) >= 3


@pytest.mark.skipif(not SEED_CATALOG.is_file(), reason="seed data not available")
def test_catalog_contains_seed_catalog():
    for entry in _load(SEED_CATALOG):
        assert BY_CODE[entry["code"]]["display"] == entry["display"]


@pytest.mark.skipif(
    not (SHARED / "synthea-r4").is_dir() or not SEED_CATALOG.is_file(),
    reason="Synthea source data not available",
)
def test_catalog_and_ndc_map_are_reproducible(tmp_path):
    out, ndc = tmp_path / "rxnorm.json", tmp_path / "ndc_rxnorm.json"
    assert make_terminology().main(["--out", str(out), "--ndc-out", str(ndc)]) == 0
    assert out.read_bytes() == CATALOG_PATH.read_bytes()
    assert ndc.read_bytes() == (REPO / "fixtures" / "terminology" / "ndc_rxnorm.json").read_bytes()


def make_terminology():
    """scripts/make_terminology.py as a module."""
    spec = importlib.util.spec_from_file_location("make_terminology", REPO / "scripts" / "make_terminology.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_script_pairs_an_ndc_only_with_the_rxnorm_code_beside_it(tmp_path):
    ndc_system, rxnorm = "http://hl7.org/fhir/sid/ndc", "http://www.nlm.nih.gov/research/umls/rxnorm"

    def request(rx: str | None, ndc: str) -> dict:
        codings = ([{"system": rxnorm, "code": rx, "display": f"drug {rx}"}] if rx else []) + [
            {"system": ndc_system, "code": ndc}]
        return {"resource": {"resourceType": "MedicationRequest", "medicationCodeableConcept": {"coding": codings}}}

    bundle = {"resourceType": "Bundle", "entry": [
        request("309362", "63629-1437-1"),  # paired: mapped
        request("310965", "11111-1111-11"),
        request("243670", "11111-1111-11"),  # the same NDC beside two products: left out
        request(None, "22222-2222-22"),      # no RxNorm beside it: left out
    ]}
    (tmp_path / "b.json").write_text(json.dumps(bundle), encoding="utf-8")
    assert make_terminology().ndc_pairs([tmp_path]) == [{"ndc": "63629-1437-1", "rxnorm_code": "309362"}]
