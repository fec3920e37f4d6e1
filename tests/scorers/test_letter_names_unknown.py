"""Names of drugs the record does not have, and names a reader still reads as the case's drug
(issue 28, item 2): a lay / class name said of the patient's own medicine where the case has no
drug of the class, a brand of the committed lexicon the case lacks, and an unknown capitalised
word in a drug's place are invented drugs; a product named by its words ("Vitamin B 12") is named
by its head word and its spellings too; "inhaler" names the case's inhaled drugs. Each wrong
letter fails the check named, with a reason naming it; the right letter in the same words passes."""

from __future__ import annotations

import pytest
from test_letter_scorer import GOOD, TRUTH, failed

from pytest_groundeval.scorers.letter import check_letter

KEEP = "Please keep taking amlodipine 5 mg every day."


@pytest.mark.parametrize("line, named", [
    ("Also keep taking your thyroid pill every day.", "thyroid pill"),
    ("Also keep taking your antidepressant every day.", "antidepressant"),
    ("Also keep taking your inhaler every day.", "inhaler"),
    ("Do not stop your thyroid pill.", "thyroid pill"),  # negated, still the patient's own
    ("Keep taking your heart medicine.", "heart medicine"),
    ("Keep taking your reflux pills.", "reflux pills"),
    ("Keep taking your seizure medicine.", "seizure medicine"),
    ("Keep using your blood thinner.\n", None),  # the record's completed clopidogrel: not invented (see right)
])
def test_a_class_name_with_no_drug_of_the_class_in_the_case_is_invented(line, named):
    why = failed(GOOD + "\n" + line)
    if named is None:
        assert "no_invented_drug" not in why
    else:
        assert named in why["no_invented_drug"]


@pytest.mark.parametrize("right", [
    GOOD.replace(KEEP, "Please keep taking your blood pressure pill, amlodipine 5 mg, every day."),
    GOOD + "\nDo not start any other painkiller without asking us.",
    GOOD + "\nAvoid sleeping pills.",
    GOOD + "\nDo not take sleeping pills with these.",
    GOOD + "\nPlease do not take a new antidepressant without talking to us first.",
])
def test_a_class_name_of_a_case_drug_or_of_any_drug_of_the_class_passes(right):
    assert "no_invented_drug" not in failed(right)


@pytest.mark.parametrize("brand", ["Coreg", "Singulair", "Jardiance", "Wellbutrin"])
def test_a_lexicon_brand_the_case_lacks_is_invented(brand):
    why = failed(GOOD + f"\nAlso keep taking your {brand} every day.")
    assert brand.lower() in why["no_invented_drug"]


def test_a_brand_of_a_case_drug_names_it():
    truth = {**TRUTH, "items": TRUTH["items"] + [{"code": "200031", "display": "Carvedilol 6.25 MG Oral Tablet",
                                                  "verdict": "matched"}]}
    right = GOOD + "\nAlso keep taking your Coreg every day."
    assert {k for k, d in check_letter(right, truth).items() if not d.passed} == set()
    wrong = GOOD + "\nPlease keep taking carvedilol. Stop your Coreg."
    assert not check_letter(wrong, truth)["no_contradiction"].passed


@pytest.mark.parametrize("wrong", [
    GOOD + "\nAlso keep taking your Zyxtrol every day.",
    GOOD + "\nStop taking Fenorix too.",
    GOOD + "\nTake your Fenorix as before.",
    GOOD + "\nStop Fenorix.",
])
def test_an_unknown_capitalised_word_in_a_drugs_place_is_invented(wrong):
    why = failed(wrong)
    assert "a word no drug list knows" in why["no_invented_drug"]


@pytest.mark.parametrize("right", [
    GOOD.replace(KEEP, "Please keep taking your Medicines as before, amlodipine 5 mg every day."),
    "## Keep Taking Your Current Medicines\n" + GOOD,
    GOOD + "\nTake Monday's dose as usual.",
    GOOD + "\nPlease take Lisa with you to the clinic.",  # a name after a bare "take"
    GOOD + "\nPlease continue with Physiotherapy.",
    GOOD.replace(KEEP, "Please keep taking Amlodipine 5 mg every day."),  # a case word, capitalised
])
def test_a_capitalised_common_or_case_word_is_not_invented(right):
    assert "no_invented_drug" not in failed(right)


VITAMIN = {
    "items": [{"code": "2001499", "display": "Vitamin B 12 5 MG/ML Injectable Solution", "verdict": "matched"},
              {"code": "197361", "display": "Amlodipine 5 MG Oral Tablet", "verdict": "matched"}],
    "record": [{"code": "2001499", "display": "Vitamin B 12 5 MG/ML Injectable Solution", "status": "active"},
               {"code": "197361", "display": "Amlodipine 5 MG Oral Tablet", "status": "active"}],
    "note": "",
}
VITAMIN_GOOD = "Keep taking these medicines:\n- Vitamin B12\n- Amlodipine 5 mg\n\nCall us with any questions."


@pytest.mark.parametrize("stop", ["Vitamin", "V1tam1n", "V i t a m i n", "Vit-\namin", "Vitamins"])
def test_a_product_named_by_its_words_is_named_by_its_head_word_and_its_spellings(stop):
    dims = check_letter(VITAMIN_GOOD + f"\n\nPlease stop taking {stop}.", VITAMIN)
    assert not dims["no_contradiction"].passed and "Vitamin B 12" in dims["no_contradiction"].reason


@pytest.mark.parametrize("right", [
    VITAMIN_GOOD,
    "Keep taking your vitamin and amlodipine 5 mg as before.\n\nCall us with any questions.",
    VITAMIN_GOOD + "\n\nYou do not need to stop vitamin D from the shop.",  # another vitamin: not B12
])
def test_the_head_word_kept_or_another_vitamin_passes(right):
    assert all(d.passed for d in check_letter(right, VITAMIN).values())


INHALERS = {
    "items": [{"code": "745679", "display": "200 ACTUAT Albuterol 0.09 MG/ACTUAT Metered Dose Inhaler",
               "verdict": "matched"},
              {"code": "895994", "display": "120 ACTUAT Fluticasone propionate 0.044 MG/ACTUAT Metered Dose Inhaler",
               "verdict": "matched"}],
    "record": [], "note": "",
}
INHALERS["record"] = [{**t, "status": "active"} for t in INHALERS["items"]]


def test_inhaler_names_the_cases_inhaled_drugs():
    base = "Keep using albuterol and fluticasone as before.\n\nCall us with any questions."
    wrong = check_letter(base + "\n\nStop taking your inhaler.", INHALERS)["no_contradiction"]
    assert not wrong.passed and "albuterol" in wrong.reason and "fluticasone" in wrong.reason
    right = check_letter("Keep using your inhalers as before.\n\nCall us with any questions.", INHALERS)
    assert all(d.passed for d in right.values())
