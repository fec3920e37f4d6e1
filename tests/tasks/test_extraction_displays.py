"""Issue 28 (extraction): a display is an element of the answer, so it must denote the code it
stands beside, or the item earns nothing (default deny). Before, a right RxNorm code under
"Plavix" (on a nitroglycerin spray) or any other name passed. Read with ``scorers.drugtext``
(the catalog's drug words, the committed lexicon's brands, spelling folded): the record's or the
catalog's display in any letter case, the ingredient, a brand of the same product, another
wording with the same strength and form all pass; another drug's name (a brand, an
ingredient, spliced in, spelt with digits), another strength, or a display that names no drug
anyone knows ("heart pill", an unknown brand: unverifiable) fail with a reason."""

from __future__ import annotations

import json

import pytest

from pytest_groundeval.scorers.extraction import score_extraction
from pytest_groundeval.tasks.extraction import parse_answer

NITRO = {"code": "705129", "display": "Nitroglycerin 0.4 MG/ACTUAT Mucosal Spray"}
AMLO = {"code": "197361", "display": "Amlodipine 5 MG Oral Tablet"}
B12 = {"code": "2001499", "display": "Vitamin B 12 5 MG/ML Injectable Solution"}
#: a drug of this record that neither the catalog nor the lexicon knows
ZORV = {"code": "999001", "display": "Zorvexaprine 10 MG Oral Tablet"}
SIMVI = {"code": "316672", "display": "Simvistatin 10 MG"}  # Synthea's spelling
ALEN = {"code": "904419", "display": "Alendronic acid 10 MG Oral Tablet"}
PRED = {"code": "312617", "display": "predniSONE 5 MG Oral Tablet"}
TRUTH = [NITRO, AMLO, B12, ZORV, SIMVI, ALEN, PRED]


def scored(**displays):
    """The right codes, with ``displays`` (by code) in place of the record's."""
    items = [{**t, "display": displays.get("d" + t["code"], t["display"])} for t in TRUTH]
    return score_extraction(parse_answer(json.dumps({"active_medications": items})), TRUTH)


WRONG = {
    "a brand of another drug": ({"d705129": "Plavix"}, "705129", "names plavix, not nitroglycerin"),
    "another drug's name spliced in": ({"d197361": "Amlodipine 5 MG Oral Tablet / Clopidogrel"}, "197361",
                                       "names clopidogrel"),
    "another brand spelt with digits": ({"d197361": "Pl4v1x"}, "197361", "names plavix"),
    "another ingredient": ({"d705129": "Warfarin"}, "705129", "names warfarin"),
    "another strength": ({"d197361": "Amlodipine 10 MG Oral Tablet"}, "197361", "states 10 mg"),
    "a record drug the catalog lacks, on another code": ({"d197361": "Amlodipine 5 MG / Zorvexaprine"}, "197361",
                                                         "names zorvexaprine"),
    "a lay name (names no product)": ({"d197361": "heart pill"}, "197361", "unverifiable"),
    "an unknown brand": ({"d705129": "Nitrozorvex"}, "705129", "unverifiable"),
    "another item's display": ({"d2001499": "Amlodipine 5 MG Oral Tablet"}, "2001499", "names amlodipine"),
    "a drug two letters from the product's": ({"d312617": "prednisoLONE 5 MG Oral Tablet"}, "312617",
                                              "names prednisolone"),
}


@pytest.mark.parametrize("displays,code,why", WRONG.values(), ids=list(WRONG))
def test_a_display_that_does_not_denote_its_code_earns_nothing(displays, code, why):
    s = scored(**displays)
    assert not s.passed and s.metrics["tp"] == len(TRUTH) - 1 and code in s.details["wrong_displays"]
    assert why in s.details["wrong_displays"][code] and "display not of its code" in s.reason


RIGHT = {
    "the record's displays": {},
    "lower case": {"d705129": NITRO["display"].lower(), "d197361": AMLO["display"].lower()},
    "upper case": {"d705129": NITRO["display"].upper()},
    "the ingredient": {"d705129": "Nitroglycerin", "d197361": "amlodipine"},
    "a brand of the same product (lexicon)": {"d705129": "Nitrostat", "d197361": "Norvasc"},
    "another wording, same strength and form": {"d197361": "amlodipine 5mg tab", "d705129": "nitroglycerin spray"},
    "the display with a remark": {"d197361": "Amlodipine 5 MG Oral Tablet (once daily)"},
    "a name without drug words, written another way": {"d2001499": "vitamin B12 injection"},
    "the record's own drug the catalog lacks": {"d999001": "zorvexaprine 10 mg"},
    "no display (the key is optional)": {"d705129": None},
    "the right spelling of a misspelt record display": {"d316672": "Simvastatin 10 MG Oral Tablet"},
    "the anion for the acid": {"d904419": "alendronate 10 mg tablet"},
}


@pytest.mark.parametrize("displays", RIGHT.values(), ids=list(RIGHT))
def test_a_display_naming_the_same_product_passes(displays):
    s = scored(**displays)
    assert s.passed and s.metrics["f1"] == 1.0 and not s.details["wrong_displays"], s.reason


def test_the_catalog_display_of_the_code_passes_where_the_record_names_it_otherwise():
    truth = [{**NITRO, "display": "NTG spray"}]
    answer = json.dumps({"active_medications": [NITRO]})  # the catalog's display of 705129
    assert score_extraction(parse_answer(answer), truth).passed
    assert not score_extraction(parse_answer(json.dumps({"active_medications": [{**NITRO, "display": "Plavix"}]})),
                                truth).passed
