"""Coding consistency (issue 15 item 3): every place a MedicationStatement names its drug agrees
with the product the case documents, on the committed write cases.

For each rule, a tampered expected answer that FAILS coding (its named check, a readable
reason, no other dimension) and a correct answer written another way that PASSES:

* ``other_codings``: a coding of another system (SNOMED, NDC) denotes the product when its
  display names its drug by the site catalog; another drug / strength fails, and so does one
  the case cannot verify (no display, or a display naming no drug the catalog knows);
* ``concept_text``: ``medicationCodeableConcept.text`` states no other drug, strength, salt,
  release or dose form ("Amlodipine 10 mg" on a 5 mg tablet); brands the catalog knows and
  names it does not know are read as the catalog reads them;
* ``medication_resource``: a contained Medication's ingredients, strength and form;
* ``rxnorm_display``: an RxNorm display that is another correct name of the concept passes;
  the display of another catalog concept fails.

Run: ``uv run pytest tests/scorers/test_write_coding_consistency.py -p no:groundeval -q``
"""

from __future__ import annotations

import pytest
from write_corpus import CASES, NDC, RXNORM, SNOMED, answer, assert_fails, assert_passes, check

from pytest_groundeval.scorers import drugtext
from pytest_groundeval.scorers.write import score_write


def _with_coding(case_id, coding):
    r = answer(case_id)
    r["medicationCodeableConcept"]["coding"].append(coding)
    return r


def _with_text(case_id, text):
    r = answer(case_id)
    r["medicationCodeableConcept"]["text"] = text
    return r


def _contained(case_id, **medication):
    """The expected answer with its medication as a contained Medication."""
    r = answer(case_id)
    code = r.pop("medicationCodeableConcept")
    r["contained"] = [{"resourceType": "Medication", "id": "med", "code": code, **medication}]
    r["medicationReference"] = {"reference": "#med"}
    return r


# ---------------------------------------------------------------- codings of other systems

def test_snomed_coding_for_another_drug_fails():
    # the issue's trick: an extra SNOMED coding for clopidogrel on a statement of another drug
    r = _with_coding("aspirin-active-daily", {"system": SNOMED, "code": "108979001",
                                              "display": "Clopidogrel 75 mg oral tablet"})
    assert_fails(r, "aspirin-active-daily", "coding", "other_codings", "names clopidogrel, not aspirin")


def test_snomed_coding_for_another_strength_fails():
    r = _with_coding("amlodipine-injected-instruction", {"system": SNOMED, "code": "376737000",
                                                         "display": "Amlodipine 10 mg oral tablet"})
    assert_fails(r, "amlodipine-injected-instruction", "coding", "other_codings", "states 10 mg; the product is 5 mg")


# The rule for a coding the task cannot map (an unknown system, or an NDC the committed map does
# not hold): it fails unless its display is absent AND its code is unknown rather than
# contradicting (issue 28). A display is a claim about a code nobody here can check, even one
# naming the product; a code-only coding that denotes nothing known passes.

@pytest.mark.parametrize("case_id,display", [
    ("aspirin-active-daily", "Aspirin 81 mg oral tablet"),
    ("aspirin-active-daily", "Aspirin (substance)"),
    ("clopidogrel-on-hold-surgery", "Clopidogrel 75 mg oral tablet"),
    ("tylenol-brand-name", "Tylenol 325 mg tablet"),
    ("hctz-abbreviation-morning", "HCTZ 25 mg tablet"),
])
def test_unmapped_coding_with_a_display_fails_even_naming_the_product(case_id, display):
    r = _with_coding(case_id, {"system": SNOMED, "code": "123456", "display": display})
    assert_fails(r, case_id, "coding", "other_codings", "on a code the task cannot map to RxNorm")


@pytest.mark.parametrize("system,code", [(NDC, "63629-1437-1"), (SNOMED, "108979001"),
                                         ("http://example.org/formulary", "CLOP-75")])
def test_unmapped_coding_with_no_display_and_an_unknown_code_passes(system, code):
    # the issue's right resource: a second coding (NDC) with no display is no longer "unverifiable"
    assert_passes(_with_coding("clopidogrel-on-hold-surgery", {"system": system, "code": code}),
                  "clopidogrel-on-hold-surgery")


@pytest.mark.parametrize("system", [SNOMED, "http://example.org/formulary"])
def test_unmapped_coding_whose_code_is_another_products_fails(system):
    # no display, but the code is the catalog's RxNorm code of another product: it contradicts
    r = _with_coding("clopidogrel-on-hold-surgery", {"system": system, "code": "243670"})
    assert_fails(r, "clopidogrel-on-hold-surgery", "coding", "other_codings", "is the RxNorm code of 'aspirin")


def test_coding_whose_display_names_no_known_drug_fails():
    # "Plavix" is not in the site catalog: the display is a claim nobody can check
    r = _with_coding("clopidogrel-on-hold-surgery", {"system": NDC, "code": "63629-1437-1", "display": "Plavix"})
    assert_fails(r, "clopidogrel-on-hold-surgery", "coding", "other_codings", "cannot map to RxNorm")


@pytest.fixture
def ndc_map(monkeypatch):
    """A committed-map stand-in: the data hold no NDC today (scripts/make_terminology.py writes
    an empty map), so the mapped path is shown on a map the test gives."""
    from pytest_groundeval.fhir import medications

    pairs = {"63629-1437-1": "309362", "0573-0164-40": "310965"}  # clopidogrel 75 mg, ibuprofen 200 mg
    monkeypatch.setattr(medications, "ndc_rxnorm_map", lambda: pairs)
    return pairs


@pytest.mark.parametrize("display", [None, "Clopidogrel 75 MG Oral Tablet"])
def test_mapped_ndc_of_the_same_product_passes(ndc_map, display):
    coding = {"system": NDC, "code": "63629-1437-1", **({"display": display} if display else {})}
    assert_passes(_with_coding("clopidogrel-on-hold-surgery", coding), "clopidogrel-on-hold-surgery")


def test_mapped_ndc_of_another_product_fails(ndc_map):
    r = _with_coding("clopidogrel-on-hold-surgery", {"system": NDC, "code": "0573-0164-40"})
    assert_fails(r, "clopidogrel-on-hold-surgery", "coding", "other_codings", "is the NDC of RxNorm 310965")


def test_mapped_ndc_under_another_system_contradicts_too(ndc_map):
    r = _with_coding("clopidogrel-on-hold-surgery", {"system": "http://example.org/ndc", "code": "0573-0164-40"})
    assert_fails(r, "clopidogrel-on-hold-surgery", "coding", "other_codings", "is the NDC of RxNorm 310965")


def test_the_committed_ndc_map_is_the_scripts_output_on_the_data():
    # the Synthea and seed bundles carry RxNorm only: the map the script builds from them is empty
    import json
    from pathlib import Path

    from pytest_groundeval.fhir.medications import ndc_rxnorm_map

    path = Path(__file__).resolve().parents[2] / "fixtures" / "terminology" / "ndc_rxnorm.json"
    assert json.loads(path.read_text(encoding="utf-8")) == []
    assert ndc_rxnorm_map() == {}


# ---------------------------------------------------------------- the concept's text

@pytest.mark.parametrize("case_id,text,why", [
    ("amlodipine-injected-instruction", "Amlodipine 10 mg", "states 10 mg; the product is 5 mg"),
    ("aspirin-active-daily", "Clopidogrel 75 mg", "names clopidogrel, not aspirin"),
    ("acetaminophen-prn-range", "Vicodin", "names vicodin, not acetaminophen"),  # a brand of a combination
    ("metoprolol-er-strength", "metoprolol tartrate 25 mg", "names the salt tartrate"),
    ("metformin-ir-held-contrast", "metformin ER 500 mg", "says extended release; the product is not"),
    ("metformin-er-two-tablets", "metformin 500 mg immediate-release tablet", "says immediate release"),
    ("amoxicillin-capsule-250-tid", "amoxicillin 250 mg tablet", "names the dose form tablet"),
    ("memantine-oral-solution-ml", "memantine 10 mg tablet", "states 10 mg"),
    ("lasix-stopped-no-regimen", "furosemide 20 mg", "states 20 mg; the product is 40 mg"),
])
def test_text_contradicting_the_product_fails(case_id, text, why):
    assert_fails(_with_text(case_id, text), case_id, "coding", "concept_text", why)


@pytest.mark.parametrize("case_id,text", [
    ("amlodipine-injected-instruction", "amlodipine 5 MG Oral Tablet"),
    ("amlodipine-injected-instruction", "Norvasc 5 mg"),  # a brand the catalog does not know: not read
    ("tylenol-brand-name", "Tylenol 325 mg"),
    ("acetaminophen-prn-range", "Tylenol 325 mg tablet"),  # a brand of the same single ingredient
    ("metoprolol-er-strength", "Toprol XL 25 mg"),
    ("metoprolol-er-strength", "metoprolol succinate ER 25 mg tablet"),
    ("metformin-ir-held-contrast", "Metformin HCl 500 mg tablet"),
    ("memantine-oral-solution-ml", "memantine 10 mg/5 mL oral solution"),  # 2 mg/mL
    ("albuterol-puffs-prn-range", "albuterol HFA 90 mcg/actuation inhaler"),
    ("lasix-stopped-no-regimen", "furosemide 40 mg"),  # the ingredient of a brand-only display
    ("klonopin-prn-panic", "Klonopin 0.5 mg"),  # a display with no strength is not compared
    ("aspirin-active-daily", "the patient's daily heart pill"),  # names nothing: nothing contradicts
])
def test_text_naming_the_same_product_passes(case_id, text):
    assert_passes(_with_text(case_id, text), case_id)


# ---------------------------------------------------------------- a contained Medication

def _ingredient(text, coding=None, strength=None):
    item = {"itemCodeableConcept": {"text": text, **({"coding": [coding]} if coding else {})}}
    return {**item, **({"strength": strength} if strength else {})}


def _ratio(mg, per_value=1, per_unit="{tbl}"):
    return {"numerator": {"value": mg, "unit": "mg", "system": "http://unitsofmeasure.org", "code": "mg"},
            "denominator": {"value": per_value, "unit": per_unit, "system": "http://unitsofmeasure.org",
                            "code": per_unit}}


def test_contained_medication_whose_ingredient_is_another_drug_fails():
    r = _contained("aspirin-active-daily", ingredient=[_ingredient("clopidogrel")])
    assert_fails(r, "aspirin-active-daily", "coding", "medication_resource", "names clopidogrel, not aspirin")


def test_contained_medication_ingredient_coding_of_another_drug_fails():
    coding = {"system": RXNORM, "code": "32968", "display": "clopidogrel"}
    r = _contained("aspirin-active-daily", ingredient=[{"itemCodeableConcept": {"coding": [coding]}}])
    assert_fails(r, "aspirin-active-daily", "coding", "medication_resource", "names clopidogrel")


def test_contained_medication_ingredient_strength_of_another_product_fails():
    r = _contained("amlodipine-injected-instruction", ingredient=[_ingredient("amlodipine", strength=_ratio(10))])
    assert_fails(r, "amlodipine-injected-instruction", "coding", "medication_resource",
                 "10 mg is not the product's strength")


def test_contained_medication_ingredient_by_reference_is_unverifiable():
    r = _contained("aspirin-active-daily", ingredient=[{"itemReference": {"reference": "Substance/x"}}])
    assert_fails(r, "aspirin-active-daily", "coding", "medication_resource", "unverifiable")


def test_contained_medication_code_text_contradicting_fails():
    r = _contained("aspirin-active-daily")
    r["contained"][0]["code"]["text"] = "aspirin 325 mg"
    assert_fails(r, "aspirin-active-daily", "coding", "concept_text", "states 325 mg; the product is 81 mg")


def test_contained_medication_form_of_another_dose_form_fails():
    r = _contained("amoxicillin-capsule-250-tid", form={"text": "Oral tablet"})
    assert_fails(r, "amoxicillin-capsule-250-tid", "coding", "medication_resource", "names the dose form tablet")


@pytest.mark.parametrize("case_id,medication", [
    ("aspirin-active-daily", {"ingredient": [_ingredient("Aspirin", strength=_ratio(81))], "form": {"text": "tablet"}}),
    ("memantine-oral-solution-ml", {"ingredient": [_ingredient("memantine hydrochloride",
                                                               strength=_ratio(10, 5, "mL"))]}),
    ("tylenol-brand-name", {"ingredient": [_ingredient("acetaminophen", strength=_ratio(325))]}),
    ("lasix-stopped-no-regimen", {"ingredient": [_ingredient("furosemide", strength=_ratio(40))]}),
])
def test_contained_medication_agreeing_with_the_product_passes(case_id, medication):
    assert_passes(_contained(case_id, **medication), case_id)


def test_a_second_contained_medication_is_read_too():
    # referenced (so dom-3 holds) from derivedFrom: what it says is part of the statement
    r = answer("aspirin-active-daily")
    r["contained"] = [{"resourceType": "Medication", "id": "m2",
                       "code": {"coding": [{"system": RXNORM, "code": "309362",
                                            "display": "Clopidogrel 75 MG Oral Tablet"}]}}]
    r["derivedFrom"] = [{"reference": "#m2"}]
    score = score_write(r, CASES["aspirin-active-daily"])
    assert "coding" in {n for n, d in score.dimensions.items() if not d.passed}, score.reason
    assert "contained[0].code.coding[0] '309362' != expected 243670" in check(score, "coding", "rxnorm_code").reason


# ---------------------------------------------------------------- the RxNorm display

@pytest.mark.parametrize("case_id,display", [
    ("tylenol-brand-name", "Tylenol 325 mg oral tablet"),  # the brand, strength and form of 209387
    ("aspirin-active-daily", "ASA 81 mg oral tablet"),
    ("metoprolol-er-strength", "metoprolol succinate 25 mg extended-release oral tablet"),
])
def test_rxnorm_display_that_is_another_correct_name_passes(case_id, display):
    r = answer(case_id)
    r["medicationCodeableConcept"]["coding"][0]["display"] = display
    score = score_write(r, CASES[case_id])
    assert score.passed, score.reason
    assert "another name of the same product" in check(score, "coding", "rxnorm_display").reason


@pytest.mark.parametrize("case_id,display,why", [
    ("tylenol-brand-name", "Acetaminophen 325 MG Oral Tablet", "is the display of RxNorm 313782"),
    ("acetaminophen-prn-range", "Tylenol 325 mg oral tablet", "the product is not a branded one"),
    ("metoprolol-er-strength", "metoprolol succinate 25 mg oral tablet", "does not name extended release"),
    ("aspirin-active-daily", "aspirin 81 mg", "does not name the dose form tablet"),
    ("aspirin-active-daily", "aspirin 325 mg tablet", "states 325 mg"),
])
def test_rxnorm_display_naming_another_concept_fails(case_id, display, why):
    r = answer(case_id)
    r["medicationCodeableConcept"]["coding"][0]["display"] = display
    assert_fails(r, case_id, "coding", "rxnorm_display", why)


# ---------------------------------------------------------------- the reader itself

def test_vocabulary_is_the_site_catalogs():
    vocab = drugtext.vocabulary()
    assert {"clopidogrel", "warfarin", "tylenol", "toprol"} <= vocab.names
    assert vocab.brand_ingredients["tylenol"] == {"acetaminophen"}
    assert vocab.brand_ingredients["vicodin"] == {"acetaminophen", "hydrocodone"}
    assert not {"oral", "tablet", "sodium", "mg"} & vocab.names


def test_the_issues_warfarin_examples():
    # warfarin is in the site catalog (855332) though no committed case writes it
    prod = drugtext.product("Warfarin Sodium 5 MG Oral Tablet", "warfarin")
    assert drugtext.conflicts("Warfarin 10 mg", prod) == ["states 10 mg; the product is 5 mg"]
    assert drugtext.conflicts("warfarin sodium 5 MG Oral Tablet", prod) == []
    assert drugtext.conflicts("Coumadin 5 mg", prod) == []  # not a catalog brand: not read, strength agrees
    assert drugtext.conflicts("Clopidogrel 75 mg", prod)[0] == "names clopidogrel, not warfarin"


def test_medication_reference_display_naming_another_drug_fails():
    r = _contained("aspirin-active-daily")
    r["medicationReference"]["display"] = "Clopidogrel 75 mg"
    assert_fails(r, "aspirin-active-daily", "coding", "concept_text", "medicationReference.display")
    r["medicationReference"]["display"] = "Aspirin 81 mg tablet"
    assert_passes(r, "aspirin-active-daily")


@pytest.mark.parametrize("system", ["urn:oid:2.16.840.1.113883.6.88", "http://www.nlm.nih.gov/research/umls/rxnorm/",
                                    "https://www.nlm.nih.gov/research/umls/rxnorm", "RxNorm"])
def test_rxnorm_under_another_system_uri_is_read_as_rxnorm(system):
    # an odd encoding of a wrong code, beside the right canonical coding, with the right display
    case = CASES["aspirin-active-daily"]
    r = _with_coding("aspirin-active-daily", {"system": system, "code": "212033",
                                              "display": case["expected"]["display"]})
    assert_fails(r, "aspirin-active-daily", "coding", "other_codings", "is RxNorm under another system URI")
    r["medicationCodeableConcept"]["coding"][1]["code"] = case["expected"]["rxnorm_code"]
    assert_passes(r, "aspirin-active-daily")


# ---------------------------------------------------------------- the tricks, on every committed case

def _other_drug(case):
    return ("Warfarin Sodium 5 MG Oral Tablet", "warfarin") if "clopidogrel" in case["expected"]["display"].lower() \
        else ("Clopidogrel 75 MG Oral Tablet", "clopidogrel")


@pytest.mark.parametrize("case_id", sorted(CASES))
def test_coding_contradictions_fail_coding_on_every_committed_case(case_id):
    case = CASES[case_id]
    display, name = _other_drug(case)
    extra = {"system": SNOMED, "code": "123456", "display": display}
    assert_fails(_with_coding(case_id, extra), case_id, "coding", "other_codings", f"names {name}")
    assert_fails(_with_text(case_id, display), case_id, "coding", "concept_text", f"names {name}")
    r = _contained(case_id, ingredient=[_ingredient(name)])
    assert_fails(r, case_id, "coding", "medication_resource", f"names {name}")
    strengths = drugtext.product(case["expected"]["display"]).reading.strengths
    if strengths:  # "<drug> <twice the strength>" on the product
        mg, per = strengths[0]
        text = f"{case['expected']['display'].split()[0]} {mg * 2:g} mg" + (f"/{per}" if per else "")
        assert_fails(_with_text(case_id, text), case_id, "coding", "concept_text", "states")


@pytest.fixture
def catalog_with_coumadin():
    from pytest_groundeval.fhir import hc_tools

    entries = [*hc_tools.get_catalog().entries,
               {"code": "855334", "display": "Warfarin Sodium 5 MG Oral Tablet [Coumadin]", "system": RXNORM}]
    hc_tools.set_catalog(entries)
    yield
    hc_tools.set_catalog(None)


def test_a_brand_the_site_catalog_knows_is_read_as_its_ingredient(catalog_with_coumadin):
    prod = drugtext.product("Warfarin Sodium 5 MG Oral Tablet", "warfarin")
    assert drugtext.conflicts("Coumadin 5 mg", prod) == []
    assert drugtext.names_product("Coumadin 5 mg", prod)
    # and on a committed case of another drug, that brand is another drug
    r = _with_coding("clopidogrel-on-hold-surgery", {"system": SNOMED, "code": "1", "display": "Coumadin 5 mg tablet"})
    assert_fails(r, "clopidogrel-on-hold-surgery", "coding", "other_codings", "names coumadin, not clopidogrel")

